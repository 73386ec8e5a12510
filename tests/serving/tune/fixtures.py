"""Shared pieces of the tuner's tests: tiny packaged repositories (no torch), an int8 copy of
their model, and a simulated measurement whose throughput and p95 follow a formula, with a
clock that only moves when a simulated candidate is measured."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.tune.in_process import InProcessPoint
from attndeploy.serving.tune.measure import LevelPoint, Measurement, sweep_stop
from attndeploy.serving.tune.space import Candidate
from tests.serving.onnx_fixtures import build_model, fixture_vocab, save_model

NAME = "tiny"
TEXT = f"{NAME}_text"
# How the text model runs its id model: its ONNX in its own process (the default), or by BLS.
TEXT_CALLS = ("onnxruntime", "bls")


def for_call(candidate: Candidate, call: str) -> Candidate:
    """`candidate` as a text model packaged with `call` holds it: one that runs the ONNX itself
    has no text-model fields of its own."""
    return candidate if call == "bls" else replace(candidate, text_instances=None,
                                                   text_queue_delay_us=None)


def tiny_repo(root: Path, *, text: bool = True, hidden: int = 8, **options) -> Path:
    """`root/repo` holding `tiny` (python flavour) and, with `text`, `tiny_text`; the ONNX file
    is `root/tiny.onnx`."""
    model = build_model(vocab=fixture_vocab() if text else None, hidden=hidden)
    onnx_path = save_model(model, root / f"{NAME}.onnx")
    package_model(onnx_path, root / "repo", PackageOptions(name=NAME, **options))
    return root / "repo"


def int8_copy(source: Path, out: Path, *, record: bool = True,
              activations: str = "per-batch") -> Path:
    """onnxruntime's dynamic int8 quantization of `source`, its activations scaled per batch (as
    onnxruntime writes it, and `attndeploy quantize --activations per-batch`) or, rewritten, per
    row (quantize's default), with an `attndeploy.quantization` record as quantize adds one
    (`record`)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from attndeploy.quantize.per_row import per_row_activations

    quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8)
    if record or activations == "per-row":
        model = onnx.load(str(out))
        if activations == "per-row":
            assert per_row_activations(model) > 0
        if record:
            entry = model.metadata_props.add()
            entry.key, entry.value = "attndeploy.quantization", json.dumps(
                {"method": "dynamic", "activations": activations})
        onnx.save(model, str(out))
    return out


# throughput(candidate, concurrency) -> (infer/s, p95 ms)
Formula = Callable[[Candidate, int], tuple[float, float]]


def batching_formula(candidate: Candidate, concurrency: int) -> tuple[float, float]:
    """Throughput grows with the batch the clients can fill and with instances up to 2; the
    queue delay costs latency; int8 is 1.5x as fast; p95 grows with concurrency."""
    batch = min(concurrency, candidate.max_batch_size)
    speed = 1.5 if candidate.precision == "int8" else 1.0
    throughput = speed * 400.0 * batch ** 0.6 * min(candidate.instances, 2) ** 0.5
    p95 = 1000.0 * concurrency / throughput + candidate.max_queue_delay_us / 1000.0
    return throughput, p95


@dataclass
class Simulated:
    """A `measure` for `run_tune`: every level from `formula`, the sweep pruned as the real one
    is, each candidate costing `seconds` of the simulated clock."""

    formula: Formula = batching_formula
    seconds: float = 30.0
    now: float = 0.0
    calls: list[tuple[str, str]] = field(default_factory=list)  # (candidate name, role)
    interrupt_at: int | None = None  # raise KeyboardInterrupt on this call (1-based)

    def clock(self) -> float:
        return self.now

    def __call__(self, target, candidate: Candidate, settings, workdir, *, role, on_level=None
                 ) -> Measurement:
        self.calls.append((candidate.name, role))
        if self.interrupt_at == len(self.calls):
            raise KeyboardInterrupt
        self.now += self.seconds
        levels: list[LevelPoint] = []
        stopped = None
        for concurrency in settings.concurrency:
            throughput, p95 = self.formula(candidate, concurrency)
            checked = int(candidate.precision != "int8" or concurrency == 1
                          or not target.int8.scaled_per_batch)  # as the load tester checks
            levels.append(LevelPoint(concurrency, throughput, p95 / 2, p95, p95 * 1.2,
                                     float(min(concurrency, candidate.max_batch_size)), 0,
                                     checked, 0, True))
            if on_level is not None:
                on_level(levels[-1])
            stopped = sweep_stop(levels, settings.latency_budget_ms, settings.min_level_gain)
            if stopped is not None:
                break
        return Measurement(candidate, role, tuple(levels), None, stopped, self.seconds)


def simulated_reference(onnx_path, *, text, batch_size, seq, threads, workers, seconds, seed,
                        text_file) -> InProcessPoint:
    """In-process onnxruntime as a formula: 1000 rows/s per batch row, capped."""
    return InProcessPoint(batch_size, 1000.0 * min(batch_size, 8), 1.0, 10, workers, threads)
