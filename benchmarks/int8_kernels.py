"""int8 GEMM kernels at a MiniLM layer's sizes (issue #55): which onnxruntime kernel could carry
batch-independent (per-row) int8 at 8 × 128 as fast as the per-batch one.

For each of the layer's four weight GEMMs at M = batch·seq rows (K × N = 384×1152 packed QKV,
384×384 attention output, 384×1536 and 1536×384 FFN), one single-node model per kernel:

- `fp32`: MatMul;
- `per_batch`: com.microsoft DynamicQuantizeMatMul (one activation scale for the whole input:
  what `quantize_dynamic` writes; per-channel int8 weights);
- `block32`, `block128`: a standard opset-21 blockwise `DequantizeLinear(int8, block_size)` →
  MatMul, which onnxruntime fuses at load into `MatMulNBits(bits=8, accuracy_level=4)`:
  activations quantized per row and per block inside the kernel, so batch-independent.

Timed interleaved (every kernel once per round, `--rounds`), median CPU time per call after
`--warmup` rounds, `--threads` intra-op threads; the mean |error| against numpy fp32 beside it,
and the fused graph's node types, checked. Writes OUT/int8_kernels.json.

Run: `.venv/bin/python benchmarks/int8_kernels.py [--batch 8 --seq 128] [--threads 1]
[--rounds 15] [--out benchmarks/results]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attndeploy.fsutil import atomic_write_text  # noqa: E402

SIZES = ((384, 1152), (384, 384), (384, 1536), (1536, 384))  # K × N of MiniLM's weight GEMMs
OPSET = helper.make_opsetid("", 21)


def _graph(rows: int, k: int, n: int, nodes: list, weights: list) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])
    graph = helper.make_graph(nodes, "gemm", [x], [y], weights)
    return helper.make_model(graph, opset_imports=[OPSET, helper.make_opsetid("com.microsoft", 1)])


def fp32_model(rows: int, weight: np.ndarray) -> onnx.ModelProto:
    k, n = weight.shape
    return _graph(rows, k, n, [helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [numpy_helper.from_array(weight, "w")])


def per_batch_model(rows: int, weight: np.ndarray) -> onnx.ModelProto:
    """DynamicQuantizeMatMul with symmetric per-column int8 weights."""
    k, n = weight.shape
    scale = (np.abs(weight).max(axis=0) / 127.0).astype(np.float32)  # [N]
    quantized = np.clip(np.round(weight / scale), -127, 127).astype(np.int8)  # [K, N]
    node = helper.make_node("DynamicQuantizeMatMul", ["x", "wq", "ws", "wz"], ["y"],
                            domain="com.microsoft")
    return _graph(rows, k, n, [node], [numpy_helper.from_array(quantized, "wq"),
                                       numpy_helper.from_array(scale, "ws"),
                                       numpy_helper.from_array(np.zeros(n, np.int8), "wz")])


def blockwise_model(rows: int, weight: np.ndarray, block: int) -> onnx.ModelProto:
    """Symmetric int8 weights with one scale per `block` rows of K and column: DQ → MatMul."""
    k, n = weight.shape
    blocks = weight.reshape(k // block, block, n)  # [K/block, block, N]
    scale = (np.abs(blocks).max(axis=1) / 127.0).astype(np.float32)  # [K/block, N]
    quantized = np.clip(np.round(blocks / scale[:, None, :]), -127, 127).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    return _graph(rows, k, n, nodes, [numpy_helper.from_array(quantized.reshape(k, n), "wq"),
                                      numpy_helper.from_array(scale, "ws")])


def session(model: onnx.ModelProto, threads: int, optimized: Path | None = None
            ) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # no warning about saving an optimized model
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def measure(rows: int, k: int, n: int, threads: int, rounds: int, warmup: int,
            workdir: Path) -> dict:
    rng = np.random.default_rng(k * 10_000 + n)
    weight = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    fused = workdir / f"block32_{k}x{n}.onnx"
    sessions = {"fp32": session(fp32_model(rows, weight), threads),
                "per_batch": session(per_batch_model(rows, weight), threads),
                "block32": session(blockwise_model(rows, weight, 32), threads, fused),
                "block128": session(blockwise_model(rows, weight, 128), threads)}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(warmup + rounds):
        for name, each in sessions.items():
            started = time.process_time()
            each.run(None, {"x": x})
            times[name].append(time.process_time() - started)
    reference = x @ weight
    return {
        "k": k, "n": n,
        "ms": {name: round(float(np.median(t[warmup:])) * 1000, 3) for name, t in times.items()},
        "mean_abs_error": {name: float(np.abs(each.run(None, {"x": x})[0] - reference).mean())
                           for name, each in sessions.items()},
        "block32_fused_ops": [node.op_type for node in onnx.load(str(fused)).graph.node],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    rows = args.batch * args.seq
    with tempfile.TemporaryDirectory() as tmp:
        gemms = [measure(rows, k, n, args.threads, args.rounds, args.warmup, Path(tmp))
                 for k, n in SIZES]
    totals = {name: round(sum(g["ms"][name] for g in gemms), 2) for name in gemms[0]["ms"]}
    report = {"rows": rows, "threads": args.threads, "rounds": args.rounds,
              "clock": "process CPU time", "onnxruntime": ort.__version__,
              "load_average": os.getloadavg(), "gemms": gemms, "total_ms": totals,
              "ratio_to_per_batch": {name: round(ms / totals["per_batch"], 2)
                                     for name, ms in totals.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "int8_kernels.json", json.dumps(report, indent=1) + "\n")
    for gemm in gemms:
        print(f"{gemm['k']}x{gemm['n']}: {gemm['ms']}  fused: {gemm['block32_fused_ops']}")
    print(f"total ms {totals}; ratio to per_batch {report['ratio_to_per_batch']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
