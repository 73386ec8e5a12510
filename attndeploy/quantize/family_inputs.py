"""`quantize` of an export whose family makes its own inputs (image-classification: images, not
token ids), found by its checks part's hooks (`random_feeds`, `example_feeds`; see
`families/image_classification/checks`), not by a branch on the family.

The graph is quantized as a text encoder's (`quantizer._quantize`: int8 MatMul/Gemm weights,
the `attndeploy` nodes keep their functions, GA-Net's gate network in fp32 by default, the
metadata copied), and judged on the family's inputs instead of random token ids:

- the grid (`GridCheck`): random images of the export's size, one batch per `--shapes` batch
  size (default 1, 4, 16): the largest |logit change|, label agreement, GA-Net's gate flips;
- with `--data` (`DataCheck`): the labelled images of a folder (its `test/` part when it has
  `train/` and `test/`): label agreement of int8 against fp32 and both accuracies.

Tolerances, candidates (`dynamic`, `static` calibrated on the `--data` images, `best`) and the
result are the text encoders' (`quantizer.Candidate`, `QuantizeResult`): the file is written
only within them. Both models run in onnxruntime sessions of the export's own inputs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from attndeploy.errors import DataError, QuantizeError
from attndeploy.fsutil import (
    atomic_write_bytes,
    check_not_an_input,
    check_output_file,
    check_replaceable,
)
from attndeploy.quantize import quantizer
from attndeploy.quantize.check import DataCheck, GridCheck
from attndeploy.quantize.options import DEFAULT_BATCH_GRID, QuantizeOptions
from attndeploy.runtime.names import GATES, META_PREFIX
from attndeploy.validate.families import FamilyChecks, checks_part, family_checks


def _metadata(path: Path) -> dict[str, str]:
    """The attndeploy metadata of an ONNX file, keys without the prefix ({} if unreadable)."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # protobuf raises DecodeError and others: the encoder path's message
        return {}
    return {p.key[len(META_PREFIX):]: p.value for p in model.metadata_props
            if p.key.startswith(META_PREFIX)}


def family_hooks(path: Path) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """(random_feeds, example_feeds) of the family of the export at `path` when its checks part
    makes its own inputs; None otherwise (or when the file is not readable as one)."""
    from attndeploy.errors import ConfigError

    if not Path(path).is_file():
        return None
    head = _metadata(Path(path)).get("head")
    if not head:
        return None
    try:
        part = checks_part(head)
    except ConfigError:
        return None
    hooks = (getattr(part, "random_feeds", None), getattr(part, "example_feeds", None))
    return hooks if all(hook is not None for hook in hooks) else None


class _Model:
    """One ONNX file in onnxruntime: run(feed) -> its outputs by name."""

    def __init__(self, path: Path, threads: int | None) -> None:
        from attndeploy.runtime.sessions import create_session

        self.path = path
        self.session = create_session(str(path), threads=threads)
        self.outputs = [output.name for output in self.session.get_outputs()]

    def run(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, self.session.run(self.outputs, dict(feed)), strict=True))


@dataclass
class BothRuns:
    """fp32 and int8 on the same feeds: each one's decision rows [N, C], the hard gates that
    differ (None for an ungated model) and the gates compared, and the feeds' input shapes."""

    fp32: np.ndarray
    int8: np.ndarray
    gate_flips: int | None
    gates: int
    shapes: list[tuple[int, ...]]

    def agreement(self, checks: FamilyChecks) -> float | None:
        agree = checks.agreement(self.fp32, self.int8)
        return None if agree is None else float(np.asarray(agree, bool).mean())


def run_both(fp32: _Model, int8: _Model, feeds: list[dict[str, np.ndarray]],
             checks: FamilyChecks) -> BothRuns:
    """Both models on every feed (one batch each), their decision output gathered."""
    name = checks.decision_output
    before, after, flips, gates = [], [], 0, 0
    for feed in feeds:
        a, b = fp32.run(feed), int8.run(feed)
        before.append(a[name])  # [b, C]
        after.append(b[name])
        if GATES in a:  # [b, T]: an image's every position is real
            flips += int((a[GATES] != b[GATES]).sum())
            gates += int(a[GATES].size)
    return BothRuns(np.concatenate(before), np.concatenate(after),  # [N, C] each
                    flips if gates else None, gates,
                    [tuple(next(iter(feed.values())).shape) for feed in feeds])


def grid_check(runs: BothRuns, checks: FamilyChecks) -> GridCheck:
    """The grid's statistics: the largest |logit change|, label agreement, gate flips."""
    return GridCheck(float(np.abs(runs.fp32 - runs.int8).max()), runs.agreement(checks),
                     runs.gate_flips, runs.shapes, checks.agreement_name)


def data_check(runs: BothRuns, gold: list[Any], file: str, checks: FamilyChecks,
               unit: str) -> DataCheck:
    """Label agreement and both models' score (accuracy) on the labelled examples."""
    scored = checks.score is not None
    return DataCheck(
        texts=len(runs.fp32), label_agreement=runs.agreement(checks),
        fp32_accuracy=checks.score(list(runs.fp32), gold) if scored else None,
        int8_accuracy=checks.score(list(runs.int8), gold) if scored else None,
        file=file, gate_flips=runs.gate_flips,
        gates=runs.gates if runs.gate_flips is not None else None,
        agreement=checks.agreement_name, score=checks.score_name, unit=unit)


def quantize_with_family_inputs(source: Path, out: Path, options: QuantizeOptions,
                                data: Path | None) -> quantizer.QuantizeResult:
    """Quantize `source` to `out`, judged on its family's inputs (module docstring)."""
    random_feeds, example_feeds = family_hooks(source) or (None, None)
    if random_feeds is None:
        raise QuantizeError(f"{source}: its family makes no inputs of its own")
    metadata = _metadata(source)
    checks = family_checks(metadata["head"])
    fp32 = _Model(source, options.threads)
    check_output_file(out)
    check_not_an_input(out, [source] + ([data] if data is not None else []))
    check_replaceable(out, force=options.force, error=QuantizeError)
    grid, _ = random_feeds(metadata, options.grid, options.seed, str(source), DEFAULT_BATCH_GRID)
    examples = gold = None
    if data is not None:
        examples, gold = example_feeds(data, metadata, str(source))
    if options.method in ("static", "best") and examples is None:
        raise DataError(f"--method {options.method} calibrates on labelled examples: give "
                        "--data (an image folder, e.g. the held-out images)")
    proto = onnx.load(str(source))
    gate_network = (quantizer.gate_network_matmuls(proto) if options.gate_network_fp32 else [])
    kept = replace(options, exclude=quantizer._joined(options.exclude, gate_network))
    wanted = ["dynamic", "static"] if options.method == "best" else [options.method]
    unit = getattr(checks_part(metadata["head"]), "EXAMPLES", "examples")
    candidates: list[tuple[quantizer.Candidate, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="attndeploy-quantize-") as scratch:
        private = quantizer._private_copy(proto, Path(scratch))
        for method in wanted:
            target = Path(scratch) / f"{method}.onnx"
            calibration = (_first(examples or [], options.calibration_texts)
                           if method == "static" else None)
            quantizer._quantize(method, private, target, kept, calibration, shown=source)
            ranking: list[dict[str, Any]] = []
            worst: list[str] = []
            used = kept
            if options.exclude_worst:
                ranking, worst = quantizer._worst_layers(source, target, grid, options,
                                                         quantizer._weight_matmuls(proto))
                worst = [name for name in worst if name not in kept.exclude]
                used = replace(kept, exclude=quantizer._joined(kept.exclude, worst))
                quantizer._quantize(method, private, target, used, calibration, shown=source)
            record = {"method": method, "per_channel": options.per_channel,
                      "reduce_range": options.reduce_range,
                      "activations": (options.dynamic_activations if method == "dynamic"
                                      else None),
                      "exclude": list(used.exclude), "gate_network": gate_network,
                      "source_weights_sha256": metadata.get("weights_sha256", "")}
            blob = quantizer._with_metadata(target, proto, record)
            target.write_bytes(blob)
            int8 = _Model(target, options.threads)
            on_data = (data_check(run_both(fp32, int8, examples, checks), gold or [],
                                  str(data), checks, unit)
                       if examples is not None else None)
            candidate = quantizer.Candidate(
                method, grid_check(run_both(fp32, int8, grid, checks), checks), on_data,
                len(blob), quantizer._count_quantized(blob),
                ranking=ranking, excluded=list(used.exclude), gate_network=gate_network,
                worst=worst)
            candidate.failures = quantizer._failures(candidate, options)
            candidates.append((candidate, blob))
    passing = [(c, blob) for c, blob in candidates if c.passed]
    chosen = None
    if passing:  # the most accurate on the examples, then the fewest label changes on the grid
        chosen, blob = max(passing, key=lambda item: (
            quantizer._or_zero(item[0].data.int8_accuracy if item[0].data else None),
            quantizer._or_zero(item[0].data.label_agreement if item[0].data else None),
            quantizer._or_zero(item[0].grid.label_agreement), -item[0].grid.max_logit_change))
        atomic_write_bytes(out, blob)
    return quantizer.QuantizeResult(source, out, options, [c for c, _ in candidates], chosen,
                                     source.stat().st_size)


def _first(feeds: list[dict[str, np.ndarray]], count: int) -> list[dict[str, np.ndarray]]:
    """The feeds that hold the first `count` examples (the last one cut to fit)."""
    kept, left = [], count
    for feed in feeds:
        if left <= 0:
            break
        kept.append({name: value[:left] for name, value in feed.items()})
        left -= len(next(iter(feed.values())))
    return kept
