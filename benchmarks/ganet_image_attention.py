"""GA-Net on images: does the attention work follow the gate density? (issue #53: "GA-Net's
attention time at density 0.3 is <= 0.5 of dense").

The Fashion-MNIST ViT (28x28 grey, patches of 4: T = 49 patches, d_model 64, 4 heads of 16,
4 layers; random init, seed 0) with GA-Net, exported as `attndeploy export` exports it (one
`GatedAttention` node per layer, the gather path: the open patches' keys and values are gathered
into N slots, N the batch's largest open count, and attention runs over those). The gate
network's final bias is shifted so that `density` of the patches of the measured batch open
(the quantile of their gate logits; images: Fashion-MNIST's test images from the Debian package,
else random pixels); each image keeps its own share, so the batch's largest open count N, which
the gather pads to, lies above the mean. Each density and batch size is its own export.
onnxruntime CPU, `--threads` intra-op threads, no spinning. Measured, per batch size:

- `attention_in_model`: the kernel time of the GatedAttention nodes in the exported ViT
  (onnxruntime's profiler: every node it inlined from the `GatedAttention` function, summed per
  run, median over `--runs` runs, and the mean per op type inside), at each density; `dense` is
  density 1.0 (every gate open: the same op over all 49 keys);
- `attention_part`: one GatedAttention node alone (Q, K, V [B, 4, 49, 16] random; gate logits
  the model's own on the benchmark images at that density) against the dense masked form of the
  same computation (the full [B, H, T, T] score matrix masked to the open keys:
  `latency.GatedAttentionDense`), wall time per call, interleaved rounds, medians; `budget`:
  the same node with exactly density x 49 gates open in every image (the gather's best case:
  N, the batch's largest open count, is then the mean);
- `model`: the whole exported ViT's wall time per call, GA-Net at each density and the
  standard-attention ViT of the same size.

With a per-image budget (`ganet_budget` b, at each of `--budgets`: every image keeps exactly
ceil(b x 49) patches, queries and keys; one `BudgetGatedAttention` node per layer), measured in
the same interleaved rounds:

- `budget_part`: one BudgetGatedAttention node alone (Q, K, V [B, 4, 49, 16] random, the
  budget model's own gate logits) against plain dense attention over all 49 patches
  (softmax(scale Q Kᵀ) V in standard ONNX ops, no gates at all), wall time per call;
- `budget_in_model`: the profiled kernel time of the BudgetGatedAttention nodes in the exported
  budget ViT, against budget 1.0's (every patch kept) and against the content-gate ViT's
  GatedAttention nodes at density 1.0;
- `model budget`: the whole budget ViT against the standard-attention ViT.

    .venv/bin/python benchmarks/ganet_image_attention.py [--batches 1,32] [--runs 200]
        [--budgets 1.0,0.5,0.3]

Writes `ganet_image_attention.json` and `.png` under `--out` (benchmarks/results/), with the
load average before and after: timings on a shared machine are noisy; the ratios come from one
interleaved run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import latency  # noqa: E402  (the GatedAttention part and its dense form)

from attndeploy.data.images import measure_preprocessing, read_idx  # noqa: E402
from attndeploy.export.generic import export_model  # noqa: E402
from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.models.vision.build import build_model  # noqa: E402
from attndeploy.models.vision.config import ImageModelConfig  # noqa: E402
from attndeploy.variants.op_registry import DEFAULT_OPSET, op_spec  # noqa: E402

IDX = ROOT / ".venv/data/dataset-fashion-mnist/usr/share/datasets/fashion-mnist"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
FUNCTION_PREFIX = "_inlfunc_GatedAttention"  # onnxruntime's name of a node inlined from it
BUDGET_PREFIX = "_inlfunc_BudgetGatedAttention"
DENSE = 1.0
HEADS, HEAD_DIM, POSITIONS = 4, 16, 49  # the ViT's attention: d_model 64 in 4 heads, 7x7 patches
QKV_DIMS = ["B", HEADS, POSITIONS, HEAD_DIM]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--densities", default="1.0,0.5,0.3")
    parser.add_argument("--budgets", default="1.0,0.5,0.3",
                        help="ganet_budget values (1.0 first: the others' in-model reference)")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--runs", type=int, default=200, help="profiled / timed runs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--images", type=Path, default=IDX / TEST_IMAGES,
                        help="IDX images (default Fashion-MNIST's test set; random if absent)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def benchmark_images(path: Path, count: int, seed: int) -> tuple[np.ndarray, str]:
    """uint8 [count, 1, 28, 28]: the first `count` IDX images, else random pixels."""
    if path.is_file():
        return read_idx(path)[:count, None], str(path)
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 1, 28, 28), dtype=np.uint8), "random pixels"


def build(variant: str, seed: int, budget: float | None = None) -> torch.nn.Module:
    """The random-init ViT; a budget keeps the content-gate model's weights (same seed, same
    parameters), only the layers' rule changes."""
    torch.manual_seed(seed)
    config = ImageModelConfig(num_labels=10, variant=variant, dropout=0.0, ganet_budget=budget)
    return build_model(config).eval()


@torch.no_grad()
def gate_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The gate network's decision logits [N, T] on x [N, C, H, W] (as the forward computes)."""
    tokens = model.patches(x).flatten(2).transpose(1, 2)  # [N, D, 7, 7] -> [N, T, D]
    h = tokens + model.positions[None]  # [N, T, D]
    mask = torch.ones(h.shape[:2], dtype=torch.bool)  # [N, T]
    return model.gates.network(h, mask)  # [N, T]


def at_density(model: torch.nn.Module, x: torch.Tensor, density: float) -> torch.nn.Module:
    """A copy whose gate bias opens `density` of the patches of x (every gate for 1.0)."""
    shifted = copy.deepcopy(model)
    logits = gate_logits(model, x).flatten()
    with torch.no_grad():
        if density >= 1.0:
            shift = float(logits.min()) - 1.0  # all logits > 0 after the shift
        else:
            ordered = torch.sort(logits, descending=True).values
            n_open = max(1, round(density * len(ordered)))
            shift = float(ordered[n_open - 1] + ordered[n_open]) / 2  # between open and closed
        shifted.gates.network.score.bias -= shift
    return shifted


def export(model: torch.nn.Module, path: Path, gated: bool) -> Path:
    example = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    export_model(model, path, inputs={"pixel_values": example},
                 dynamic_shapes={"pixel_values": {0: "batch"}},
                 output_names=["logits", "gates"] if gated else ["logits"],
                 opset=DEFAULT_OPSET, metadata={"attndeploy.version": "benchmark"})
    return path


def session(path: Path, threads: int, profile: str | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def profiled_attention_ms(path: Path, feed: dict[str, np.ndarray], runs: int, threads: int,
                          scratch: Path, prefix: str = FUNCTION_PREFIX) -> dict[str, float]:
    """Per run: the kernel ms of the nodes inlined from the op `prefix` names (GatedAttention,
    or BudgetGatedAttention), and of all nodes (median over `runs` profiled runs after 10
    warm-up runs)."""
    sess = session(path, threads, str(scratch / path.stem))
    for _ in range(10):
        sess.run(None, feed)
    for _ in range(runs):
        sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    model_runs = sorted((e for e in events if e.get("name") == "model_run"),
                        key=lambda e: e["ts"])[-runs:]
    nodes = sorted((e for e in events if e.get("cat") == "Node"
                    and e["name"].endswith("_kernel_time")), key=lambda e: e["ts"])
    attention, total = [], []
    by_op: dict[str, float] = {}
    for run in model_runs:
        inside = [e for e in nodes if run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
        ours = [e for e in inside if e["name"].startswith(prefix)]
        attention.append(sum(e["dur"] for e in ours))
        total.append(sum(e["dur"] for e in inside))
        for e in ours:
            op_name = e.get("args", {}).get("op_name", "?")
            by_op[op_name] = by_op.get(op_name, 0.0) + e["dur"] / 1e3 / len(model_runs)
    return {"attention_ms": statistics.median(attention) / 1e3,
            "all_nodes_ms": statistics.median(total) / 1e3,
            "attention_ms_by_op": {k: round(v, 4) for k, v in
                                   sorted(by_op.items(), key=lambda item: -item[1])}}


def timed(calls: dict[str, Any], runs: int, seed: int) -> dict[str, dict[str, float]]:
    """ms per call of each callable: warm-up, then `runs` rounds, each running every callable
    once in a fresh random order (interleaved); median, p10 and p90."""
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        for _ in range(5):
            call()
    names = list(calls)
    for _ in range(runs):
        for index in rng.permutation(len(names)):
            started = time.perf_counter()
            calls[names[index]]()
            samples[names[index]].append((time.perf_counter() - started) * 1e3)
    return {name: {"median_ms": statistics.median(values),
                   "p10_ms": float(np.percentile(values, 10)),
                   "p90_ms": float(np.percentile(values, 90))}
            for name, values in samples.items()}


def part_feed(logits: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Random Q, K, V [B, 4, 49, 16]; the given gate logits [B, 49]; no padding."""
    rng = np.random.default_rng(seed)
    shape = (logits.shape[0], 4, logits.shape[1], 16)
    feed = {n: rng.standard_normal(shape, dtype=np.float32) for n in ("query", "key", "value")}
    feed["key_padding_mask"] = np.ones(logits.shape, dtype=bool)
    feed["gate_logits"] = logits.astype(np.float32)
    return feed


def budget_logits(batch: int, positions: int, density: float, seed: int) -> np.ndarray:
    """Gate logits [batch, positions] with exactly round(density * positions) open in every row
    (the gather's best case: N is the mean open count, no row above it)."""
    rng = np.random.default_rng(seed)
    logits = np.full((batch, positions), -1.0, dtype=np.float32)
    n_open = max(1, round(density * positions))
    for row in range(batch):
        logits[row, rng.choice(positions, n_open, replace=False)] = 1.0
    return logits


def _part_graph(nodes: list, name: str, inputs: list[str], outputs: dict[str, list[str]],
                functions: list, domains: dict[str, int]) -> onnx.ModelProto:
    """A model of `nodes` over Q, K, V [B, 4, 49, 16] (+ mask, logits [B, 49]): the batch
    symbolic, the rest static as in the exported ViT (onnxruntime folds what reads only them,
    e.g. the budget's k)."""
    f32, boolean = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL
    kinds = {"key_padding_mask": (boolean, ["B", POSITIONS]),
             "gate_logits": (f32, ["B", POSITIONS]), "gates": (boolean, ["B", POSITIONS])}
    value_info = [onnx.helper.make_tensor_value_info(n, *kinds.get(n, (f32, QKV_DIMS)))
                  for n in inputs]
    out_info = [onnx.helper.make_tensor_value_info(n, *kinds.get(n, (f32, dims)))
                for n, dims in outputs.items()]
    return onnx.helper.make_model(
        onnx.helper.make_graph(nodes, name, value_info, out_info),
        opset_imports=[onnx.helper.make_opsetid("", DEFAULT_OPSET),
                       *(onnx.helper.make_opsetid(d, v) for d, v in domains.items())],
        functions=functions, ir_version=10)


def budget_part_model(budget: float) -> onnx.ModelProto:
    """One BudgetGatedAttention node with its function (the shipped body), dims symbolic."""
    spec = op_spec("BudgetGatedAttention")
    inputs = ["query", "key", "value", "key_padding_mask", "gate_logits"]
    node = onnx.helper.make_node("BudgetGatedAttention", inputs, ["output", "gates"],
                                 domain="attndeploy", scale=HEAD_DIM ** -0.5, budget=budget)
    return _part_graph([node], "BudgetGatedAttention", inputs,
                       {"output": QKV_DIMS, "gates": ["B", POSITIONS]},
                       [spec.function_proto(DEFAULT_OPSET)], {"attndeploy": 1})


def dense_attention_model() -> onnx.ModelProto:
    """Plain dense attention over every position, no gates: softmax(scale Q Kᵀ) V, standard
    ONNX ops (what a budget of all the positions would cost without any gate machinery)."""
    make = onnx.helper.make_node
    scale = onnx.numpy_helper.from_array(np.array(HEAD_DIM ** -0.5, dtype=np.float32), "scale")
    nodes = [
        make("Constant", [], ["scale"], value=scale),
        make("Transpose", ["key"], ["key_t"], perm=[0, 1, 3, 2]),  # [B, H, d, T]
        make("MatMul", ["query", "key_t"], ["raw"]),  # [B, H, T, T]
        make("Mul", ["raw", "scale"], ["scores"]),  # [B, H, T, T]
        make("Softmax", ["scores"], ["probs"], axis=-1),  # [B, H, T, T]
        make("MatMul", ["probs", "value"], ["output"]),  # [B, H, T, d]
    ]
    return _part_graph(nodes, "DenseAttention", ["query", "key", "value"],
                       {"output": QKV_DIMS}, [], {})


def budget_row(budget: float, batch: int, args: argparse.Namespace, x: torch.Tensor,
               feed: dict[str, np.ndarray], scratch: Path, calls: dict[str, Any],
               dense_part: ort.InferenceSession) -> dict[str, Any]:
    """One budget at one batch size: export the budget ViT, check it keeps exactly its budget
    per image, profile its attention nodes, and add its callables (whole model, node alone)
    to `calls`, which `timed` interleaves with every other measurement of the batch."""
    model = build("ganet", args.seed, budget)
    path = export(model, scratch / f"budget_{budget}_b{batch}.onnx", True)
    sess = session(path, args.threads)
    kept = sess.run(["gates"], feed)[0]  # [B, T]
    part = session_from_proto(budget_part_model(budget), args.threads)
    pf = part_feed(gate_logits(model, x[:batch]).numpy(), args.seed)
    output, _ = part.run(None, pf)
    dense_feed = {n: pf[n] for n in ("query", "key", "value")}
    entry = {
        "kept_per_image": sorted({int(k) for k in kept.sum(-1)}),
        "positions": int(kept.shape[1]),
        "node_vs_dense_attention_max_abs_diff": (
            float(np.abs(output - dense_part.run(None, dense_feed)[0]).max())
            if budget >= 1.0 else None),  # every patch kept: the node is dense attention
        **profiled_attention_ms(path, feed, args.runs, args.threads, scratch, BUDGET_PREFIX),
    }
    calls[f"model budget {budget}"] = lambda s=sess, f=feed: s.run(None, f)
    calls[f"part budget node {budget}"] = lambda s=part, f=pf: s.run(None, f)
    calls.setdefault("part dense attention",
                     lambda s=dense_part, f=dense_feed: s.run(None, f))
    return entry


def budget_ratios(row: dict[str, Any], budgets: list[float]) -> dict[str, Any]:
    """Each budget's time over its dense references: the node alone over plain dense
    attention; in the model over budget 1.0's nodes and over the content gates' at density
    1.0; the whole ViT over the standard-attention ViT."""
    timed_row, out = row["timed"], {}
    full = row["budgets"].get(str(DENSE))
    content_dense = row["densities"].get(str(DENSE))
    for b in budgets:
        entry = row["budgets"][str(b)]
        out[str(b)] = {
            "part_node_vs_dense_attention": (timed_row[f"part budget node {b}"]["median_ms"]
                                             / timed_row["part dense attention"]["median_ms"]),
            "in_model_vs_budget_1": (entry["attention_ms"] / full["attention_ms"]
                                     if full else None),
            "in_model_vs_content_gates_density_1": (
                entry["attention_ms"] / content_dense["attention_ms"] if content_dense else None),
            "model_vs_standard": (timed_row[f"model budget {b}"]["median_ms"]
                                  / timed_row["model standard"]["median_ms"]),
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    densities = [float(d) for d in args.densities.split(",")]
    budgets = [float(b) for b in args.budgets.split(",") if b]
    batches = [int(b) for b in args.batches.split(",")]
    load_before = os.getloadavg()
    pixels, source = benchmark_images(args.images, max(batches) * 8, args.seed)
    preprocessing = measure_preprocessing(pixels)
    x = torch.from_numpy(preprocessing.normalise(pixels))  # [N, 1, 28, 28]
    ganet, standard = build("ganet", args.seed), build("standard", args.seed)
    results: dict[str, Any] = {"batches": {}, "densities": densities, "budgets": budgets}
    with tempfile.TemporaryDirectory(prefix="ganet-image-") as scratch_name:
        scratch = Path(scratch_name)
        standard_path = export(standard, scratch / "standard.onnx", False)
        part = {"gather": latency.attention_part_model(dense=False),
                "dense": latency.attention_part_model(dense=True)}
        part_sessions = {name: session_from_proto(proto, args.threads)
                         for name, proto in part.items()}
        dense_part = session_from_proto(dense_attention_model(), args.threads)
        for batch in batches:
            feed = {"pixel_values": x[:batch].numpy()}
            row: dict[str, Any] = {"densities": {}}
            calls: dict[str, Any] = {}
            for d in densities:
                model = at_density(ganet, x[:batch], d)  # the threshold of these images
                path = export(model, scratch / f"ganet_{d}_b{batch}.onnx", True)
                sess = session(path, args.threads)
                gates = sess.run(["gates"], feed)[0]  # [B, T]
                logits = gate_logits(model, x[:batch]).numpy()  # [B, T]
                pf = part_feed(logits, args.seed)
                budget = part_feed(budget_logits(batch, gates.shape[1], d, args.seed),
                                   args.seed)
                gathered, open_g = part_sessions["gather"].run(None, pf)
                dense_out, open_d = part_sessions["dense"].run(None, pf)
                row["densities"][str(d)] = {
                    "realised_density": float(gates.mean()),
                    "gathered_slots": int(gates.sum(-1).max()),  # N: the batch's largest count
                    "positions": int(gates.shape[1]),
                    "gates_match_model": bool((open_g == gates).all()),
                    "part_gather_vs_dense_max_abs_diff": float(
                        np.abs(gathered - dense_out).max()),
                    **profiled_attention_ms(path, feed, args.runs, args.threads, scratch),
                }
                calls[f"model ganet {d}"] = (lambda s=sess, f=feed: s.run(None, f))
                for form, ps in part_sessions.items():
                    calls[f"part {form} {d}"] = (lambda s=ps, f=pf: s.run(None, f))
                calls[f"part budget {d}"] = (lambda s=part_sessions["gather"], f=budget:
                                             s.run(None, f))
            row["budgets"] = {str(b): budget_row(b, batch, args, x, feed, scratch, calls,
                                                 dense_part) for b in budgets}
            std = session(standard_path, args.threads)
            calls["model standard"] = lambda s=std, f=feed: s.run(None, f)
            row["timed"] = timed(calls, args.runs, args.seed)
            row["ratios"] = ratios(row, densities)
            row["budget_ratios"] = budget_ratios(row, budgets)
            results["batches"][str(batch)] = row
            print(f"batch {batch}: " + json.dumps(row["ratios"]), flush=True)
            print(f"batch {batch}, budgets: " + json.dumps(row["budget_ratios"]), flush=True)
    results["target"] = verdict(results, 0.3)
    results["setup"] = {
        "model": "ViT 28x28 grey, patch 4 (49 patches), d_model 64, 4 heads, 4 layers, "
                 "d_ff 128, random init seed 0; GA-Net gather export and ganet_budget export "
                 f"(opset {DEFAULT_OPSET})",
        "uptime": _uptime(),
        "images": source, "threads": args.threads, "runs": args.runs,
        "onnxruntime": ort.__version__, "torch": torch.__version__,
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "command": " ".join(["benchmarks/ganet_image_attention.py", *(argv or sys.argv[1:])]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "ganet_image_attention.json", json.dumps(results, indent=2))
    plot(results, args.out / "ganet_image_attention.png")
    print(json.dumps(results["target"], indent=2))
    return results


def session_from_proto(proto: Any, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def ratios(row: dict[str, Any], densities: list[float]) -> dict[str, Any]:
    """Each density's time over the dense reference's: in the model (density 1.0's profiled
    attention) and alone (the dense masked form on the same gates)."""
    out: dict[str, Any] = {}
    dense = row["densities"].get(str(DENSE))
    for d in densities:
        entry = row["densities"][str(d)]
        timed_row = row["timed"]
        out[str(d)] = {
            "in_model_vs_density_1": (entry["attention_ms"] / dense["attention_ms"]
                                      if dense else None),
            "part_gather_vs_dense_form": (timed_row[f"part gather {d}"]["median_ms"]
                                          / timed_row[f"part dense {d}"]["median_ms"]),
            "part_budget_vs_dense_form_all_open": (
                timed_row[f"part budget {d}"]["median_ms"]
                / timed_row[f"part dense {DENSE}"]["median_ms"]
                if f"part dense {DENSE}" in timed_row else None),
            "part_gather_vs_dense_form_all_open": (
                timed_row[f"part gather {d}"]["median_ms"]
                / timed_row[f"part dense {DENSE}"]["median_ms"]
                if f"part dense {DENSE}" in timed_row else None),
            "model_vs_standard": (timed_row[f"model ganet {d}"]["median_ms"]
                                  / timed_row["model standard"]["median_ms"]),
        }
    return out


def _uptime() -> str:
    try:
        return os.popen("uptime").read().strip()
    except OSError:
        return ""


def verdict(results: dict[str, Any], density: float) -> dict[str, Any]:
    """The issue's target at `density`: attention time <= 0.5 of dense, per batch size, for the
    content gates and for a budget of `density`."""
    found, budget_found = {}, {}
    for batch, row in results["batches"].items():
        r = row["ratios"].get(str(density))
        if r is None:
            continue
        in_model = r["in_model_vs_density_1"]
        found[batch] = {"attention_in_model_ratio": in_model,
                        "attention_part_ratio": r["part_gather_vs_dense_form_all_open"],
                        "attention_part_budget_ratio": r["part_budget_vs_dense_form_all_open"],
                        "met_in_model": None if in_model is None else in_model <= 0.5}
        b = row.get("budget_ratios", {}).get(str(density))
        if b is not None:
            budget_found[batch] = {**b, "met_node_alone": b["part_node_vs_dense_attention"] <= 0.5,
                                   "met_in_model": (None if b["in_model_vs_budget_1"] is None
                                                    else b["in_model_vs_budget_1"] <= 0.5)}
    return {"density": density, "threshold": 0.5, "by_batch": found,
            "budget_by_batch": budget_found}


def plot(results: dict[str, Any], path: Path) -> None:
    """Per batch size: each measurement's time over its dense reference, against the density,
    with the issue's target (0.5) as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = list(results["batches"])
    budgeted = bool(results.get("budgets"))
    figure, axes = plt.subplots(2 if budgeted else 1, len(batches),
                                figsize=(5 * len(batches), 8 if budgeted else 4), squeeze=False)
    for ax, batch in zip(axes[0], batches, strict=True):
        row = results["batches"][batch]
        densities = [float(d) for d in row["densities"]]
        ratios_by = row["ratios"]
        lines = (("in_model_vs_density_1", "o-", "GatedAttention in the ViT / all gates open "
                  "(profiled)"),
                 ("part_gather_vs_dense_form_all_open", "s-", "one node alone / dense form"),
                 ("part_budget_vs_dense_form_all_open", "^-", "alone, exactly density x 49 "
                  "open per image / dense form"),
                 ("model_vs_standard", "x:", "whole ViT / standard-attention ViT"))
        draw_ratios(ax, densities, ratios_by, lines,
                    "gate density asked for (realised: see the JSON)",
                    f"batch {batch}: content gates")
    if budgeted:
        for ax, batch in zip(axes[1], batches, strict=True):
            plot_budgets(ax, batch, results["batches"][batch])
    figure.suptitle("GA-Net ViT (49 patches): attention time against gate density and "
                    "budget, onnxruntime CPU")
    figure.tight_layout()
    atomic_write_png(figure, path, dpi=120)
    plt.close(figure)


def plot_budgets(ax: Any, batch: str, row: dict[str, Any]) -> None:
    """One batch size's budget ratios against the budget, with the target line."""
    budgets = sorted(float(b) for b in row["budgets"])
    lines = (("part_node_vs_dense_attention", "^-", "BudgetGatedAttention alone / dense "
              "attention"),
             ("in_model_vs_budget_1", "o-", "its nodes in the ViT / budget 1.0's (profiled)"),
             ("model_vs_standard", "x:", "whole budget ViT / standard-attention ViT"))
    draw_ratios(ax, budgets, row["budget_ratios"], lines,
                "ganet_budget (share of the 49 patches each image keeps)",
                f"batch {batch}: per-image budget")


def draw_ratios(ax: Any, xs: list[float], ratios: dict[str, dict[str, Any]],
                lines: tuple[tuple[str, str, str], ...], xlabel: str, title: str) -> None:
    """Each (key, style, label) of `lines` as time over its dense reference against `xs`
    (`ratios[str(x)][key]`; a series with a missing point is left out), with the target."""
    for key, style, label in lines:
        values = [ratios[str(x)][key] for x in xs]
        if all(v is not None for v in values):
            ax.plot(xs, values, style, label=label)
    ax.axhline(0.5, color="red", linestyle="--", linewidth=1, label="target: 0.5 of dense")
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time / dense reference")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)


if __name__ == "__main__":
    main()
