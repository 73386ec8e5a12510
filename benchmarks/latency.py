"""Latency: PyTorch eager vs onnxruntime (CPU) vs torch.compile, per attention variant.

Every variant gets the same model size (transformer classifier, d_model 64, 4 heads, 2 layers,
d_ff 128, max_seq 512, random init, fixed seed); each is saved as a checkpoint and exported with
`attndeploy.export.export_checkpoint` (opset 18, one `attndeploy` node per attention layer). Then,
at batch {1, 8} x seq {128, 512} (no padding unless `--pad-fraction`), it times

- `eager`: the PyTorch model under `torch.inference_mode` (GA-Net: the model's default dense
  masked path; `eager_gather` is the same model with `gather_open_keys=True`);
- `ort`: onnxruntime's CPU provider on the exported model, all graph optimizations;
- `compile`: `torch.compile` (inductor, CPU), batch unbacked and seq dynamic, so one compiled
  graph serves every shape; where inductor rejects that, `dynamic=True` (a failure of both is
  recorded, not fatal);

plus the GA-Net attention part on its own (`ganet_attention`): one GatedAttention node (the
op's gather body) against the dense masked form of the same computation (a second ONNX function
that masks the full score matrix), batch 8, 4 heads, d 16, seq 512, gate density 0.25.

PyTorch and onnxruntime run with the same thread count (`--threads`, default 2; onnxruntime
intra-op threads = torch.set_num_threads, inter-op 1), and neither spins idle threads
(onnxruntime `allow_spinning=0`; the script re-runs itself with OMP_WAIT_POLICY=PASSIVE unless
the variable is set): in an interleaved run a spinning pool steals the cores from the call that
follows it, and on a loaded machine spinning OpenMP threads make eager latencies erratic.
Measurement: warm-up calls per configuration, then rounds; each round times every configuration
once, in a fresh random order (round-robin interleaving, so drift and neighbours' load hit all
configurations alike). Statistics are medians with p10/p90 over the rounds; ratios are ratios of
medians, with the median of the per-round (paired) ratios and the ratio of the minimums beside
them. Afterwards onnxruntime's profiler times every node at batch 8, seq 128 (`ort_profiles`).

GA-Net gate density: the auxiliary network is the default `mlp` on the token embedding only, so a
token's gate logit depends on its id alone. The benchmark evaluates the logit of every vocabulary
id and shifts the final layer's bias (`gates.network.score.bias`) so that exactly
`--gate-density` (0.25) of the ids have a positive logit; the uniformly random benchmark tokens
then open at about that rate (the realised density and open count N are recorded).

Run: `.venv/bin/python benchmarks/latency.py [--quick] [--out DIR] [--threads N]
[--variants standard,qvi,ganet,evolving[,qvi_pairwise]] [--no-compile]`.
Writes DIR/latency.json and DIR/latency.png (DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import io
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from attndeploy.checkpoint import save_checkpoint
from attndeploy.config import GANetConfig, ModelConfig, QVIConfig
from attndeploy.export.exporter import ExportOptions, export_checkpoint
from attndeploy.fsutil import atomic_write_png
from attndeploy.models import build_model
from attndeploy.opspec.bodies import (
    HELPERS,
    INTERNAL,
    HardGates,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
)
from attndeploy.runtime.sessions import create_session, session_options
from attndeploy.variants import op_registry

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_VARIANTS = ("standard", "qvi", "ganet", "evolving")
ALL_VARIANTS = (*DEFAULT_VARIANTS, "qvi_pairwise")
PAIRWISE_MAX_SEQ = 128  # qvi_pairwise materialises [B, H, T, T, d]: small seq only
BATCHES = (1, 8)
SEQS = (128, 512)
MODEL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128, "max_seq": 512}
VOCAB, LABELS = 1000, ("negative", "positive")
TARGET_SHAPE = (8, 128)  # (batch, seq) of the eager/ORT and variant/standard targets
ATTENTION_PART = {"batch": 8, "heads": 4, "head_dim": 16, "seq": 512}
THRESHOLDS = {"eager_over_ort": 1.3, "qvi": 1.3, "evolving": 1.6, "ganet_attention": 0.6}


@dataclasses.dataclass(frozen=True)
class Settings:
    repeats: int
    warmup: int
    budget_s: float  # the timed rounds stop after this many seconds (at least MIN_ROUNDS)


FULL = Settings(repeats=30, warmup=3, budget_s=330.0)
QUICK = Settings(repeats=3, warmup=1, budget_s=60.0)
MIN_ROUNDS = 3
PROFILE_RUNS = 10


# ----------------------------------------------------------------------------- models


def model_config(variant: str) -> ModelConfig:
    extra: dict[str, Any] = {}
    if variant == "qvi":
        extra = {"variant": "qvi", "qvi": QVIConfig(form="pooled")}
    elif variant == "qvi_pairwise":
        extra = {"variant": "qvi", "qvi": QVIConfig(form="pairwise")}
    elif variant == "ganet":
        extra = {"variant": "ganet", "ganet": GANetConfig(aux="mlp")}
    else:
        extra = {"variant": variant}
    return ModelConfig(vocab_size=VOCAB, num_labels=len(LABELS), **MODEL, **extra)


@torch.no_grad()
def set_gate_density(model: torch.nn.Module, density: float) -> float:
    """Shift the gate network's final bias so that `density` of the vocabulary opens.

    The `mlp` gate network reads the token embedding only: logit(id) is a function of the id.
    Returns the bias shift applied.
    """
    network = model.gates.network
    ids = torch.arange(1, VOCAB)  # id 0 is the padding id
    logits = network(model.embed(ids)[None], torch.ones(1, VOCAB - 1, dtype=torch.bool))[0]
    ordered = torch.sort(logits, descending=True).values
    n_open = max(1, round(density * len(ordered)))
    threshold = 0.5 * float(ordered[n_open - 1] + ordered[n_open])  # between open and closed
    network.score.bias -= threshold
    return -threshold


def build_models(variants: list[str], seed: int, density: float) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for variant in variants:
        torch.manual_seed(seed)
        model = build_model(model_config(variant)).eval()
        info: dict[str, Any] = {"config": model.config.to_dict()}
        if variant == "ganet":
            info["gate_bias_shift"] = set_gate_density(model, density)
        models[variant] = {"model": model, "info": info}
    if "ganet" in models:
        base = models["ganet"]["model"]
        config = dataclasses.replace(
            base.config, ganet=dataclasses.replace(base.config.ganet, gather_open_keys=True)
        )
        gather = build_model(config).eval()
        gather.load_state_dict(base.state_dict())
        models["ganet"]["gather_model"] = gather
    return models


def export_model(
    model: torch.nn.Module, workdir: Path, name: str, opset: int
) -> tuple[Path, float]:
    ckpt = workdir / f"ckpt_{name}"
    save_checkpoint(model, ckpt, label_names=LABELS, force=True)
    out = workdir / f"{name}.onnx"
    started = time.perf_counter()
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        export_checkpoint(ckpt, out, ExportOptions(opset=opset, max_seq=MODEL["max_seq"]))
    return out, time.perf_counter() - started


def ort_session(path_or_bytes: Path | bytes, threads: int) -> ort.InferenceSession:
    # All graph optimizations, sequential execution (onnxruntime's defaults). Idle intra-op
    # threads must not spin: in an interleaved benchmark onnxruntime's spinning pool steals the
    # cores from the PyTorch call that follows (measured: eager batch 1, seq 128 10 ms alone,
    # 200 ms right after a spinning session; onnxruntime itself unchanged).
    return create_session(path_or_bytes, threads=threads, spinning=False)


def model_inputs(
    batch: int, seq: int, seed: int, pad_fraction: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids; with `pad_fraction`, every other example (the first included) has its
    last pad_fraction of positions padded (id 0, mask 0; right padding, at least one real)."""
    generator = torch.Generator().manual_seed(seed * 7919 + batch * 1009 + seq)
    ids = torch.randint(1, VOCAB, (batch, seq), generator=generator)
    mask = torch.ones(batch, seq, dtype=torch.long)
    pads = min(seq - 1, round(pad_fraction * seq))
    if pads:
        mask[::2, seq - pads:] = 0
        ids[mask == 0] = 0
    return ids, mask


COMPILE_MODES = ("unbacked_batch", "dynamic")


def compile_model(model: torch.nn.Module, mode: str) -> Callable[..., Any]:
    """torch.compile (inductor, CPU).

    `unbacked_batch`: batch unbacked (batch 1 is not specialised) and seq dynamic, one graph for
    every benchmark shape. `dynamic`: torch.compile(dynamic=True), the fallback where inductor
    rejects the unbacked batch (it specialises batch 1: one more compilation).
    """
    if mode == "dynamic":
        return torch.compile(model, dynamic=True)
    compiled = torch.compile(model)

    def call(ids: torch.Tensor, mask: torch.Tensor) -> Any:
        # The marks stay on the tensor object: mark copies ([B, T] int64, microseconds), so
        # the caller's tensors stay unmarked for the fallback mode.
        ids, mask = ids.clone(), mask.clone()
        for tensor in (ids, mask):
            torch._dynamo.decorators.mark_unbacked(tensor, 0)
            torch._dynamo.mark_dynamic(tensor, 1)
        return compiled(ids, mask)

    return call


def first_compiled_call(
    compiled: Callable[..., Any], model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor,
    record: dict[str, Any], key: str,
) -> None:
    """Run (and so compile) one shape; record its seconds and max |logit difference| to eager."""
    t0 = time.perf_counter()
    with torch.inference_mode():
        got = compiled(ids, mask)["logits"]
        want = model(ids, mask)["logits"]
    record[f"{key}_first_call_s"] = round(time.perf_counter() - t0, 2)
    record[f"{key}_max_abs_diff"] = float((got - want).abs().max())


def compile_for_shapes(
    model: torch.nn.Module, shapes: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]
) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
    """Compile `model` and run it once per shape, in the first mode that works.

    Returns the compiled callable (None if every mode failed) and what happened: per mode the
    first-call seconds and logit differences per shape, torch._dynamo's counts (graph breaks,
    recompiles), or the error.
    """
    record: dict[str, Any] = {}
    for mode in COMPILE_MODES:
        compiled = compile_model(model, mode)
        before = dynamo_counts()
        attempt: dict[str, Any] = {}
        record[mode] = attempt
        try:
            for (b, s), (ids, mask) in shapes.items():
                first_compiled_call(compiled, model, ids, mask, attempt, f"b{b}_s{s}")
        except Exception as exc:  # a compile failure is a result: record it, try the next mode
            attempt["error"] = f"{type(exc).__name__}: {exc}"[:1500]
            continue
        attempt["dynamo"] = {k: v - before.get(k, 0) for k, v in dynamo_counts().items()}
        record["mode"] = mode
        return compiled, record
    record["mode"] = None
    return None, record


def dynamo_counts() -> dict[str, int]:
    """torch._dynamo's running totals: frames compiled, graph breaks, recompiles."""
    counters = torch._dynamo.utils.counters
    return {
        "frames_ok": int(counters["frames"]["ok"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "recompiles": int(sum(counters["recompiles"].values())),
    }


# ------------------------------------------------------------------ GA-Net attention part

BENCH = onnxscript.values.Opset("attndeploy.bench", 1)


@onnxscript.script(BENCH, default_opset=op)
def GatedAttentionDense(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    gate_logits: TFloat,
    scale: float,
) -> tuple[TFloat, BOOL]:
    """The dense masked form of GatedAttention: same gates, the full [B,H,Tq,Tk] score matrix
    masked to the open keys (docs/ops.md: softmax over open keys of S, @ V)."""
    gates = HardGates(gate_logits, key_padding_mask)  # [B, Tk]
    scores = ScaledScores(query, key, scale=scale)  # [B, H, Tq, Tk]
    probs = MaskedSoftmax(scores, op.Unsqueeze(gates, [1, 2]))  # [B, H, Tq, Tk]
    output = op.MatMul(probs, value)  # [B, H, Tq, d]
    return output, gates


def attention_part_model(dense: bool) -> onnx.ModelProto:
    """One node (GatedAttention, or the dense form) with its function, dims symbolic."""
    f32, boolean = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL
    inputs = [
        *(onnx.helper.make_tensor_value_info(n, f32, ["B", "H", "T", "d"])
          for n in ("query", "key", "value")),
        onnx.helper.make_tensor_value_info("key_padding_mask", boolean, ["B", "T"]),
        onnx.helper.make_tensor_value_info("gate_logits", f32, ["B", "T"]),
    ]
    outputs = [
        onnx.helper.make_tensor_value_info("output", f32, ["B", "H", "T", "d"]),
        onnx.helper.make_tensor_value_info("gates", boolean, ["B", "T"]),
    ]
    if dense:
        domain, name = BENCH.domain, "GatedAttentionDense"
        functions = [GatedAttentionDense.to_function_proto(), *(h.to_function_proto()
                                                                 for h in HELPERS)]
    else:
        domain, name = "attndeploy", "GatedAttention"
        functions = [op_registry.op_spec(name).function_proto(op_registry.DEFAULT_OPSET)]
    node = onnx.helper.make_node(
        name, [i.name for i in inputs], ["output", "gates"], domain=domain,
        scale=ATTENTION_PART["head_dim"] ** -0.5,
    )
    return onnx.helper.make_model(
        onnx.helper.make_graph([node], name, inputs, outputs),
        opset_imports=[
            onnx.helper.make_opsetid("", op_registry.DEFAULT_OPSET),
            onnx.helper.make_opsetid(domain, 1),
            onnx.helper.make_opsetid(INTERNAL.domain, INTERNAL.version),
        ],
        functions=functions,
        ir_version=10,
    )


def attention_part_feed(density: float, seed: int) -> dict[str, np.ndarray]:
    """Random Q, K, V; no padding; each gate open with probability `density` (logits clear of 0)."""
    rng = np.random.default_rng(seed)
    p = ATTENTION_PART
    shape = (p["batch"], p["heads"], p["seq"], p["head_dim"])
    feed = {n: rng.standard_normal(shape, dtype=np.float32) for n in ("query", "key", "value")}
    is_open = rng.random((p["batch"], p["seq"])) < density
    logits = np.where(is_open, rng.uniform(0.1, 3.0, is_open.shape),
                      rng.uniform(-3.0, -0.1, is_open.shape))
    feed["key_padding_mask"] = np.ones(is_open.shape, dtype=bool)
    feed["gate_logits"] = logits.astype(np.float32)
    return feed


# ----------------------------------------------------------------------------- measurement


@dataclasses.dataclass
class Config:
    """One timed configuration: `call()` runs it once."""

    group: str  # variant name, or "ganet_attention"
    backend: str  # eager | eager_gather | ort | compile | gather | dense
    batch: int
    seq: int
    call: Callable[[], Any]
    samples: list[float] = dataclasses.field(default_factory=list)  # ms, one per round

    @property
    def key(self) -> str:
        return f"{self.group}/{self.backend}/b{self.batch}/s{self.seq}"


def summarise(samples: list[float]) -> dict[str, Any]:
    a = np.asarray(samples)
    return {
        "median_ms": float(np.median(a)),
        "p10_ms": float(np.percentile(a, 10)),
        "p90_ms": float(np.percentile(a, 90)),
        "mean_ms": float(a.mean()),
        "min_ms": float(a.min()),
        "n": int(a.size),
        "samples_ms": [round(float(x), 4) for x in a],
    }


def ratio(num: Config | None, den: Config | None) -> dict[str, float] | None:
    """median(num)/median(den), and the median of the per-round ratios (same round = paired)."""
    if num is None or den is None or not num.samples or not den.samples:
        return None
    paired = [a / b for a, b in zip(num.samples, den.samples, strict=False)]
    return {
        "ratio": statistics.median(num.samples) / statistics.median(den.samples),
        "paired_median": statistics.median(paired),
        "ratio_of_minimums": min(num.samples) / min(den.samples),  # least disturbed calls
    }


def run_rounds(configs: list[Config], settings: Settings, seed: int, progress: Progress) -> int:
    rng = np.random.default_rng(seed)
    task = progress.add_task("warm-up", total=len(configs) * settings.warmup)
    for config in configs:
        for _ in range(settings.warmup):
            config.call()
            progress.advance(task)
    task = progress.add_task("timed rounds", total=len(configs) * settings.repeats)
    started = time.perf_counter()
    rounds = 0
    for rounds in range(1, settings.repeats + 1):  # noqa: B007 (rounds is reported)
        for index in rng.permutation(len(configs)):
            config = configs[index]
            t0 = time.perf_counter_ns()
            config.call()
            config.samples.append((time.perf_counter_ns() - t0) / 1e6)
            progress.advance(task)
        if rounds >= MIN_ROUNDS and time.perf_counter() - started > settings.budget_s:
            progress.update(task, description=f"timed rounds (budget: stopped at {rounds})")
            break
    return rounds


# ----------------------------------------------------------------------------- results


# The vector extensions the GEMMs can use: the same CPU model can be lent with or without AVX-512
# (a virtual machine may hide it), and onnxruntime's fp32 and int8 speed-ups over eager depend on
# it (benchmarks/README.md, `real_speed.py`).
CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_description() -> dict[str, Any]:
    """The CPU's model name, family/model numbers and which of CPU_FEATURES it exposes."""
    from attndeploy.quantize.cpu import cpu_fields

    fields = cpu_fields()
    flags = set(fields.get("flags", "").split())
    return {
        "cpu": fields.get("model name", ""),
        "cpu_family_model": f"{fields.get('cpu family', '?')}/{fields.get('model', '?')}",
        "cpu_features": [name for name in CPU_FEATURES if name in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def environment(threads: int) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        **cpu_description(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp default)"),
        "load_average_start": list(os.getloadavg()),
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "onnxscript": onnxscript.__version__,
            "numpy": np.__version__,
        },
        "ort_providers": ["CPUExecutionProvider"],
        "ort_session": {"graph_optimization_level": "ORT_ENABLE_ALL",
                        "intra_op_num_threads": threads, "inter_op_num_threads": 1,
                        "session.intra_op.allow_spinning": "0"},
    }


def find(configs: list[Config], group: str, backend: str, batch: int, seq: int):
    for config in configs:
        if (config.group, config.backend, config.batch, config.seq) == (group, backend, batch,
                                                                         seq):
            return config
    return None


def best_eager(configs: list[Config], variant: str, batch: int, seq: int) -> Config | None:
    """The faster of the eager paths (GA-Net: dense default and gather)."""
    found = [c for b in ("eager", "eager_gather")
             if (c := find(configs, variant, b, batch, seq)) is not None and c.samples]
    return min(found, key=lambda c: statistics.median(c.samples)) if found else None


def targets(configs: list[Config], variants: list[str]) -> dict[str, Any]:
    batch, seq = TARGET_SHAPE
    out: dict[str, Any] = {}
    per_variant = {}
    for variant in variants:
        if variant == "qvi_pairwise":
            continue
        eager = best_eager(configs, variant, batch, seq)
        r = ratio(eager, find(configs, variant, "ort", batch, seq))
        per_variant[variant] = (
            {"eager_backend": eager.backend, **r, "met": r["ratio"] >= THRESHOLDS[
                "eager_over_ort"]} if r and eager else {"met": None, "why": "not measured"}
        )
    out["ort_faster_than_eager"] = {
        "rule": "eager / ORT >= 1.3 at batch 8, seq 128, every variant (GA-Net: the faster "
                "eager path)",
        "threshold": THRESHOLDS["eager_over_ort"],
        "per_variant": per_variant,
        "met": (all(v["met"] for v in per_variant.values())
                if per_variant and all(v["met"] is not None for v in per_variant.values())
                else None),
    }
    standard = find(configs, "standard", "ort", batch, seq)
    for variant, rule in (("qvi", "QVI pooled ORT <= 1.3x standard ORT at batch 8, seq 128"),
                          ("evolving", "Evolving ORT <= 1.6x standard ORT at batch 8, seq 128")):
        r = ratio(find(configs, variant, "ort", batch, seq), standard)
        out[f"{variant}_vs_standard_ort"] = {
            "rule": rule, "threshold": THRESHOLDS[variant],
            **(r or {"why": "not measured"}),
            "met": (r["ratio"] <= THRESHOLDS[variant]) if r else None,
        }
    p = ATTENTION_PART
    r = ratio(find(configs, "ganet_attention", "gather", p["batch"], p["seq"]),
              find(configs, "ganet_attention", "dense", p["batch"], p["seq"]))
    out["ganet_attention_gather_vs_dense"] = {
        "rule": "GatedAttention (gather body) <= 0.6x the dense masked form, onnxruntime, "
                "batch 8, 4 heads, d 16, seq 512, density 0.25",
        "threshold": THRESHOLDS["ganet_attention"],
        **(r or {"why": "not measured"}),
        "met": (r["ratio"] <= THRESHOLDS["ganet_attention"]) if r else None,
    }
    return out


def results_table(configs: list[Config]) -> dict[str, Any]:
    """variant -> 'b{batch}_s{seq}' -> backend medians and ratios."""
    table: dict[str, Any] = {}
    for config in configs:
        if config.group == "ganet_attention" or not config.samples:
            continue
        row = table.setdefault(config.group, {}).setdefault(f"b{config.batch}_s{config.seq}", {
            "batch": config.batch, "seq": config.seq})
        row[config.backend] = summarise(config.samples)
    for variant, rows in table.items():
        for row in rows.values():
            b, s = row["batch"], row["seq"]
            ort_ = find(configs, variant, "ort", b, s)
            ratios = {
                "eager_over_ort": ratio(find(configs, variant, "eager", b, s), ort_),
                "compile_over_ort": ratio(find(configs, variant, "compile", b, s), ort_),
                "eager_over_compile": ratio(find(configs, variant, "eager", b, s),
                                            find(configs, variant, "compile", b, s)),
                "eager_gather_over_ort": ratio(find(configs, variant, "eager_gather", b, s), ort_),
                "ort_over_standard_ort": ratio(ort_, find(configs, "standard", "ort", b, s)),
            }
            row["ratios"] = {k: v for k, v in ratios.items() if v is not None}
    return table


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = results["results"]
    variants = list(table)
    shapes = [(b, s) for b in BATCHES for s in SEQS]
    backends = ("eager", "eager_gather", "compile", "ort")
    colours = {"eager": "#d62728", "eager_gather": "#ff9896", "compile": "#9467bd",
               "ort": "#1f77b4"}
    fig, axes = plt.subplots(1, len(shapes) + 1, figsize=(4.2 * (len(shapes) + 1), 4.4))
    for ax, (b, s) in zip(axes, shapes, strict=False):
        present = [k for k in backends
                   if any(k in table[v].get(f"b{b}_s{s}", {}) for v in variants)]
        width = 0.8 / max(1, len(present))
        for k, backend in enumerate(present):
            xs, ys, lo, hi = [], [], [], []
            for i, variant in enumerate(variants):
                stats = table[variant].get(f"b{b}_s{s}", {}).get(backend)
                if stats:
                    xs.append(i + (k - (len(present) - 1) / 2) * width)
                    ys.append(stats["median_ms"])
                    lo.append(stats["median_ms"] - stats["p10_ms"])
                    hi.append(stats["p90_ms"] - stats["median_ms"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colours[backend],
                   label=backend)
        ax.set_yscale("log")
        ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right")
        ax.set_title(f"batch {b}, seq {s}")
        ax.set_ylabel("latency, ms (median, p10-p90; log)")
    axes[0].legend(fontsize=8)
    ax = axes[-1]
    part = results["attention_part"]
    names = [n for n in ("dense", "gather") if n in part["backends"]]
    ys = [part["backends"][n]["median_ms"] for n in names]
    ax.bar(names, ys, color=["#7f7f7f", "#2ca02c"][: len(names)],
           yerr=[[part["backends"][n]["median_ms"] - part["backends"][n]["p10_ms"]
                  for n in names],
                 [part["backends"][n]["p90_ms"] - part["backends"][n]["median_ms"]
                  for n in names]], capsize=3)
    ax.set_title("GA-Net attention part (ORT)\nB8 H4 d16 T512, density "
                 f"{part.get('realised_density', 0):.2f}")
    ax.set_ylabel("latency, ms")
    fig.suptitle(f"attndeploy latency, {results['environment']['threads']} threads "
                 f"({results['environment']['cpu']})", fontsize=10)
    fig.tight_layout()
    atomic_write_png(fig, path, dpi=110)
    plt.close(fig)


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("met" if met else "NOT met")


def print_summary(console: Console, results: dict[str, Any]) -> None:
    table = Table(title="median latency, ms (eager/ORT > 1: onnxruntime is faster)")
    for column in ("variant", "batch", "seq", "eager", "eager_gather", "compile", "ORT",
                   "eager/ORT", "compile/ORT", "ORT/std"):
        table.add_column(column, justify="right", no_wrap=True)
    for variant, rows in results["results"].items():
        for row in rows.values():
            def med(backend: str, row: dict = row) -> str:
                return f"{row[backend]['median_ms']:.2f}" if backend in row else "-"

            def rat(name: str, row: dict = row) -> str:
                r = row["ratios"].get(name)
                return f"{r['ratio']:.2f}" if r else "-"

            table.add_row(variant, str(row["batch"]), str(row["seq"]), med("eager"),
                          med("eager_gather"), med("compile"), med("ort"),
                          rat("eager_over_ort"), rat("compile_over_ort"),
                          rat("ort_over_standard_ort"))
    console.print(table)
    for variant, record in results["setup"]["compile"].items():
        errors = {mode: r["error"].splitlines()[0][:140] for mode, r in record.items()
                  if isinstance(r, dict) and "error" in r}
        if errors:
            console.print(escape(f"torch.compile [{variant}]: used {record['mode']}; "
                                 f"failed: {errors}"))
    for name, target in results["targets"].items():
        if name == "ort_faster_than_eager":
            for variant, t in target["per_variant"].items():
                shown = f"{t['ratio']:.2f}" if "ratio" in t else "-"
                console.print(escape(f"target eager/ORT >= 1.3 [{variant}]: {shown} -> "
                                     f"{_verdict(t['met'])}"))
        else:
            shown = f"{target['ratio']:.3f}" if "ratio" in target else "-"
            console.print(escape(f"target {name} (threshold {target['threshold']}): {shown} -> "
                                 f"{_verdict(target['met'])}"))


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument("--threads", type=int, default=2, help="torch and ORT intra-op threads")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"comma list of {', '.join(ALL_VARIANTS)} (qvi_pairwise: seq "
                             f"<= {PAIRWISE_MAX_SEQ} only)")
    parser.add_argument("--repeats", type=int, help="timed rounds (default 30, --quick 3)")
    parser.add_argument("--budget-s", type=float,
                        help="stop the timed rounds after this many seconds (default 330)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--opset", type=int, default=op_registry.DEFAULT_OPSET,
                        help="default-domain opset of the exported models (default "
                             f"{op_registry.DEFAULT_OPSET}; 23 exports SDPA as one Attention node)")
    parser.add_argument("--gate-density", type=float, default=0.25,
                        help="GA-Net gate density of the model and of the attention part")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the onnxruntime profiles (per-node times) at batch 8, seq 128")
    parser.add_argument("--keep-models", action="store_true",
                        help="keep the checkpoints and ONNX models under OUT/models")
    parser.add_argument("--pad-fraction", type=float, default=0.0,
                        help="pad the last FRACTION of every other example (default 0: no "
                             "padding; the bodies skip their pad masking for unpadded batches)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(args.variant_list) - set(ALL_VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; valid: {', '.join(ALL_VARIANTS)}")
    return args


def eager_call(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor):
    def call():
        with torch.inference_mode():
            return model(ids, mask)

    return call


def prepare_variant(
    variant: str, entry: dict[str, Any], workdir: Path, inputs: dict, args: argparse.Namespace,
    setup: dict[str, Any],
) -> list[Config]:
    """Export (and compile) one variant; its timed configurations, one per backend and shape."""
    model = entry["model"]
    path, seconds = export_model(model, workdir, variant, args.opset)
    entry["onnx"] = path
    setup["export_s"][variant] = round(seconds, 2)
    session = ort_session(path, args.threads)
    shapes = {shape: inputs[shape] for shape in inputs
              if not (variant == "qvi_pairwise" and shape[1] > PAIRWISE_MAX_SEQ)}
    compiled = None
    if not args.no_compile:
        compiled, setup["compile"][variant] = compile_for_shapes(model, shapes)
    configs: list[Config] = []
    for (b, s), (ids, mask) in shapes.items():
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        configs.append(Config(variant, "eager", b, s, eager_call(model, ids, mask)))
        configs.append(Config(variant, "ort", b, s, lambda f=feed: session.run(None, f)))
        if compiled is not None:
            configs.append(Config(variant, "compile", b, s, eager_call(compiled, ids, mask)))
        if "gather_model" in entry:
            configs.append(Config(variant, "eager_gather", b, s,
                                  eager_call(entry["gather_model"], ids, mask)))
        if variant == "ganet":
            with torch.inference_mode():
                gates = model(ids, mask)["gates"]
            entry["info"].setdefault("realised_density", {})[f"b{b}_s{s}"] = {
                "density": float(gates[mask.bool()].float().mean()),  # over real tokens
                "max_open": int(gates.sum(-1).max()),
            }
    return configs


def prepare_attention_part(args: argparse.Namespace) -> tuple[dict[str, Any], list[Config]]:
    """The GA-Net attention part: gather body vs dense masked form, checked equal first."""
    part = ATTENTION_PART
    feed = attention_part_feed(args.gate_density, args.seed)
    sessions = {name: ort_session(attention_part_model(name == "dense").SerializeToString(),
                                  args.threads) for name in ("gather", "dense")}
    out_g, gates_g = sessions["gather"].run(None, feed)
    out_d, gates_d = sessions["dense"].run(None, feed)
    info = {
        "shape": part,
        "requested_density": args.gate_density,
        "realised_density": float(gates_g.mean()),
        "open_slots_N": int(gates_g.sum(-1).max()),
        "gather_vs_dense_max_abs_diff": float(np.abs(out_g - out_d).max()),
        "gates_agree": bool((gates_g == gates_d).all()),
        "feed": feed,  # removed before writing; used by the profiler
        "sessions": sessions,
    }
    configs = [Config("ganet_attention", name, part["batch"], part["seq"],
                      lambda s=session: s.run(None, feed)) for name, session in sessions.items()]
    return info, configs


def ort_profile(
    model: Path | bytes, feed: dict[str, np.ndarray], threads: int, runs: int, top: int = 12
) -> dict[str, Any]:
    """onnxruntime's own profiler (enable_profiling): ms per run by op type and by node."""
    with tempfile.TemporaryDirectory() as tmp:
        options = session_options(threads=threads, spinning=False)
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = create_session(model, options)
        for _ in range(runs + 2):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    by_type: dict[str, float] = {}
    by_node: dict[str, list[float]] = {}
    runs_us: list[float] = []
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op_type = event["args"]["op_name"]
            by_type[op_type] = by_type.get(op_type, 0.0) + event["dur"]
            by_node.setdefault(f"{event['name'][:-12]} ({op_type})", []).append(event["dur"])
        elif event.get("name") == "model_run":
            runs_us.append(event["dur"])
    n = max(1, len(runs_us))
    kernels = sum(by_type.values()) / n / 1000
    return {
        "runs": len(runs_us),
        "model_run_median_ms": float(np.median(runs_us) / 1000) if runs_us else None,
        "kernel_sum_ms": kernels,
        "by_op_type_ms": {k: round(v / n / 1000, 4) for k, v in
                          sorted(by_type.items(), key=lambda kv: -kv[1])},
        "top_nodes_median_ms": {k: round(float(np.median(v)) / 1000, 4) for k, v in
                                sorted(by_node.items(), key=lambda kv: -float(np.median(kv[1])))
                                [:top]},
    }


def passive_openmp() -> None:
    """Re-run this script with OMP_WAIT_POLICY=PASSIVE unless the caller chose a policy.

    libgomp reads the variable when torch loads, so it cannot be set in-process. With the default
    policy PyTorch's idle OpenMP threads spin, and on a loaded 2-core machine eager latencies
    then grow 3-7x over PASSIVE (measured: batch 8, seq 128, 122-233 ms vs 34-92 ms at load 5-6);
    onnxruntime runs with allow_spinning=0 for the same reason, so neither runtime spins.
    """
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    base = QUICK if args.quick else FULL
    settings = dataclasses.replace(
        base,
        repeats=args.repeats or base.repeats,
        budget_s=args.budget_s if args.budget_s is not None else base.budget_s,
    )
    console = Console(stderr=True, width=max(120, Console(stderr=True).width))
    torch.set_num_threads(args.threads)
    torch._logging.set_logs(dynamo=logging.ERROR)  # recompiles are counted in the JSON instead
    # The variants' models share module classes, so their compiled frames share dynamo's
    # per-code-object cache: the default limit (8) sends later variants back to eager.
    torch._dynamo.config.recompile_limit = 64
    with contextlib.suppress(RuntimeError):  # only settable before any parallel work
        torch.set_num_interop_threads(1)
    started = time.perf_counter()
    env = environment(args.threads)
    env["opset"] = args.opset
    args.out.mkdir(parents=True, exist_ok=True)
    models = build_models(args.variant_list, args.seed, args.gate_density)
    setup: dict[str, Any] = {"export_s": {}, "compile": {}}
    inputs = {(b, s): model_inputs(b, s, args.seed, args.pad_fraction)
              for b in BATCHES for s in SEQS}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress, \
            tempfile.TemporaryDirectory() as tmp:
        workdir = args.out / "models" if args.keep_models else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        configs: list[Config] = []
        task = progress.add_task("export + compile", total=len(models))
        for variant, entry in models.items():
            progress.update(task, description=f"export + compile ({variant})")
            configs += prepare_variant(variant, entry, workdir, inputs, args, setup)
            progress.advance(task)
        progress.update(task, description="export + compile")
        attention, part_configs = prepare_attention_part(args)
        configs += part_configs
        setup["seconds"] = round(time.perf_counter() - started, 1)
        env["load_average_before_rounds"] = list(os.getloadavg())
        rounds = run_rounds(configs, settings, args.seed, progress)
        env["load_average_after_rounds"] = list(os.getloadavg())
        profiles: dict[str, Any] = {}
        if not args.no_profile:
            batch, seq = TARGET_SHAPE
            ids, mask = inputs[(batch, seq)]
            feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
            task = progress.add_task("onnxruntime profiles", total=len(models) + 2)
            for variant, entry in models.items():
                profiles[f"{variant}/b{batch}_s{seq}"] = ort_profile(
                    entry["onnx"], feed, args.threads, runs=PROFILE_RUNS)
                progress.advance(task)
            for name in ("gather", "dense"):
                profiles[f"ganet_attention/{name}"] = ort_profile(
                    attention_part_model(name == "dense").SerializeToString(), attention["feed"],
                    args.threads, runs=PROFILE_RUNS)
                progress.advance(task)

    del attention["feed"], attention["sessions"]
    attention["backends"] = {c.backend: summarise(c.samples) for c in configs
                             if c.group == "ganet_attention"}
    results = {
        "benchmark": "latency",
        "environment": env,
        "settings": {**dataclasses.asdict(settings), "rounds_done": rounds,
                     "quick": args.quick, "variants": args.variant_list, "seed": args.seed,
                     "batches": BATCHES, "seqs": SEQS, "model": MODEL, "vocab": VOCAB,
                     "pairwise_max_seq": PAIRWISE_MAX_SEQ, "compile": not args.no_compile,
                     "gate_density": args.gate_density, "inputs": "random ids",
                     "pad_fraction": args.pad_fraction},
        "setup": setup,
        "models": {v: e["info"] for v, e in models.items()},
        "results": results_table(configs),
        "attention_part": attention,
        "targets": targets(configs, args.variant_list),
        "ort_profiles": profiles,
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    json_path, png_path = args.out / "latency.json", args.out / "latency.png"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, png_path)
    print_summary(console, results)
    console.print(f"wrote {json_path} and {png_path} ({results['total_seconds']} s)")
    return results


if __name__ == "__main__":
    passive_openmp()
    main()
