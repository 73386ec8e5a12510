"""BERT-base scale: every variant in a 12-layer, 768-wide, 12-head BERT, exported and timed.

Each variant is `transformers.BertForSequenceClassification(BertConfig())` (BERT-base: 12 layers,
hidden 768, 12 heads, FFN 3072, vocabulary 30522; 2 labels; random weights, seed 0) converted
with `attndeploy.integrations.transformers.convert` and saved as an attndeploy checkpoint
(max_seq 128). For each variant, in fresh child processes (so that peak memory is the step's own):

- `export`: `attndeploy.export.export_checkpoint` (the CLI's `attndeploy export`): wall and
  process CPU seconds, the exporter's stage times, peak RSS (`ru_maxrss`) and RSS after imports,
  the ONNX file's size and its `attndeploy` nodes;
- `validate` (with `--validate`): `attndeploy validate` with its default shape grid and oracles:
  wall seconds, the report's own timings, peak RSS, pass/fail;
- `measure`: parity and latency at batch {1, 8} x seq 128. Parity: max |logit| difference of
  onnxruntime (all optimizations) and torch.compile against PyTorch eager, fp32, on full-length
  batches and on a right-padded batch 8 (lengths 128, 112, ..., 16); GA-Net gates compared
  exactly. Latency: eager (`torch.inference_mode`), `torch.compile` (inductor, default mode; one
  compilation per shape, first-call seconds recorded) and onnxruntime's CPU provider, on
  full-length batches: warm-up, then rounds that run every (backend, batch) once in a fresh
  random order; medians with p10/p90 over the rounds.

`--builtin` adds today's path at the same size for comparison: the built-in `standard`
transformer classifier (d_model 768, 12 heads, 12 layers, d_ff 3072, vocabulary 30522,
max_seq 128) exported with the same `export_checkpoint` (and validated with `--validate`).

PyTorch and onnxruntime use the same threads (`--threads`, default 2; onnxruntime inter-op 1,
no spinning); the script re-runs itself with OMP_WAIT_POLICY=PASSIVE unless it is set (see
benchmarks/latency.py for why). The machine's load average is recorded before every step.

Run: `.venv/bin/python benchmarks/bert_base.py [--variants standard,qvi,ganet,evolving]
[--rounds N] [--threads N] [--validate] [--builtin] [--no-compile] [--out DIR]`.
Writes DIR/bert_base.json (DIR defaults to benchmarks/results/). Needs the `hf` extra and about
2 GB of free disk (one checkpoint and one ONNX file at a time, in a temp folder).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("standard", "qvi", "ganet", "evolving")
SEQ = 128
BATCHES = (1, 8)
LABELS = ("negative", "positive")
FIRST_ID = 5  # ids 0-4 are BERT's specials ([PAD], [UNK], [CLS], [SEP], [MASK])
PARITY_ATOL = 1e-4  # the bar for fp32 logits at this depth


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------- child steps


def prepare(variant: str, folder: Path) -> dict[str, Any]:
    """Save the variant's BERT-base checkpoint (or the built-in model's, variant `builtin`)."""
    import torch

    torch.manual_seed(0)
    checkpoint = folder / "checkpoint"
    if variant == "builtin":
        from attndeploy.checkpoint import save_checkpoint
        from attndeploy.config import ModelConfig
        from attndeploy.models import build_model

        config = ModelConfig(vocab_size=30522, num_labels=2, variant="standard", d_model=768,
                             n_heads=12, n_layers=12, d_ff=3072, max_seq=SEQ)
        save_checkpoint(build_model(config).eval(), checkpoint, label_names=LABELS)
        return {"parameters": sum(p.numel() for p in build_model(config).parameters())}
    from transformers import BertConfig, BertForSequenceClassification

    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.transformers import convert

    # a random model: no pretrained function to keep, so no warm start (as --hf-model CONFIG)
    model = convert(BertForSequenceClassification(BertConfig(num_labels=2)).eval(), variant,
                    warm_start=False)
    classifier = HFClassifier(model, model_config_of(model, SEQ))
    save_hf_checkpoint(classifier, checkpoint, label_names=LABELS)
    return {"parameters": sum(p.numel() for p in model.parameters())}


def export(folder: Path) -> dict[str, Any]:
    from attndeploy.export.exporter import export_checkpoint

    imported_mb = rss_mb()
    result = export_checkpoint(folder / "checkpoint", folder / "model.onnx")
    return {
        "seconds": round(result.seconds, 2), "cpu_seconds": round(result.cpu_seconds, 2),
        "stages": {k: round(v, 2) for k, v in result.stages.items()},
        "peak_rss_mb": round(peak_mb()), "rss_after_imports_mb": round(imported_mb),
        "onnx_mb": round((folder / "model.onnx").stat().st_size / 2**20),
        "custom_nodes": result.custom_nodes,
    }


def validate(folder: Path) -> dict[str, Any]:
    from attndeploy.validate import validate_model

    started = time.perf_counter()
    report = validate_model(folder / "checkpoint", folder / "model.onnx")
    return {"seconds": round(time.perf_counter() - started, 2), "passed": report.passed,
            "timings": report.to_json()["timings"], "peak_rss_mb": round(peak_mb())}


def _inputs(batch: int, *, padded: bool, vocab: int, seed: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_ID, vocab, (batch, SEQ), generator=generator)
    lengths = [SEQ - i * SEQ // batch for i in range(batch)] if padded else [SEQ] * batch
    mask = (torch.arange(SEQ)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def _ort_session(path: Path, threads: int) -> Any:
    from attndeploy.runtime.sessions import create_session

    return create_session(path, threads=threads, spinning=False)


def measure(folder: Path, rounds: int, threads: int, compile_: bool) -> dict[str, Any]:
    import numpy as np
    import torch

    from attndeploy.checkpoint import read_checkpoint

    torch.set_num_threads(threads)
    ckpt = read_checkpoint(folder / "checkpoint")
    model = ckpt.model.eval()
    gated = model.is_gated
    session = _ort_session(folder / "model.onnx", threads)
    names = [o.name for o in session.get_outputs()]
    vocab = ckpt.model_config.vocab_size
    shapes = {f"b{b}_s{SEQ}": _inputs(b, padded=False, vocab=vocab, seed=b) for b in BATCHES}
    shapes[f"b8_s{SEQ}_padded"] = _inputs(8, padded=True, vocab=vocab, seed=80)

    def eager(ids: Any, mask: Any) -> dict[str, Any]:
        with torch.inference_mode():
            return {k: v.numpy() for k, v in model(ids, mask).items()}

    def ort_run(ids: Any, mask: Any) -> dict[str, Any]:
        got = session.run(names, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        return dict(zip(names, got, strict=True))

    backends = {"eager": eager, "ort": ort_run}
    setup: dict[str, Any] = {}
    if compile_:
        compiled = torch.compile(model)

        def compiled_run(ids: Any, mask: Any) -> dict[str, Any]:
            with torch.inference_mode():
                return {k: v.numpy() for k, v in compiled(ids, mask).items()}

        first = {}
        try:
            for key, (ids, mask) in shapes.items():
                started = time.perf_counter()
                compiled_run(ids, mask)
                first[key] = round(time.perf_counter() - started, 2)
            backends["compile"] = compiled_run
            setup["compile_first_call_s"] = first
        except Exception as exc:  # inductor raises many types; record it, keep measuring
            setup["compile_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"

    parity: dict[str, Any] = {}
    for key, (ids, mask) in shapes.items():
        want = eager(ids, mask)
        entry: dict[str, Any] = {}
        for name, run in backends.items():
            if name == "eager":
                continue
            got = run(ids, mask)
            diff = float(np.abs(got["logits"] - want["logits"]).max())
            entry[name] = {"max_abs_logit_diff": diff, "within_1e-4": diff <= PARITY_ATOL}
            if gated:
                real = mask.numpy() != 0
                entry[name]["gate_flips"] = int((got["gates"] != want["gates"])[real].sum())
        if gated:
            real = mask.numpy() != 0
            entry["gate_density"] = float(want["gates"][real].mean())
        parity[key] = entry

    timed = {f"b{b}_s{SEQ}": shapes[f"b{b}_s{SEQ}"] for b in BATCHES}
    configs = [(backend, key) for backend in backends for key in timed]
    for backend, key in configs:  # warm-up
        backends[backend](*timed[key])
    samples: dict[tuple[str, str], list[float]] = {c: [] for c in configs}
    order = random.Random(0)
    for _ in range(rounds):
        order.shuffle(configs)
        for backend, key in configs:
            started = time.perf_counter()
            backends[backend](*timed[key])
            samples[(backend, key)].append((time.perf_counter() - started) * 1000)
    latency: dict[str, Any] = {}
    for key in timed:
        row = {}
        for backend in backends:
            values = sorted(samples[(backend, key)])
            row[backend] = {
                "median_ms": round(statistics.median(values), 1),
                "p10_ms": round(values[int(0.1 * (len(values) - 1))], 1),
                "p90_ms": round(values[int(0.9 * (len(values) - 1) + 0.5)], 1),
                "min_ms": round(values[0], 1), "n": len(values),
            }
        row["eager_over_ort"] = round(row["eager"]["median_ms"] / row["ort"]["median_ms"], 2)
        if "compile" in row:
            row["compile_over_ort"] = round(
                row["compile"]["median_ms"] / row["ort"]["median_ms"], 2)
        latency[key] = row
    return {"parity": parity, "latency": latency, "setup": setup,
            "peak_rss_mb": round(peak_mb())}


# ----------------------------------------------------------------------------- the parent


def child(step: str, variant: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", step, "--variant", variant,
               "--dir", str(folder), "--rounds", str(args.rounds),
               "--threads", str(args.threads)] + (["--no-compile"] if args.no_compile else [])
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        return {"error": "\n".join(tail), "load_before": load}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_before"] = round(load, 2)
    result["step_wall_s"] = round(time.perf_counter() - started, 1)
    return result


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime
    import torch
    import transformers
    from latency import cpu_description  # this script's folder: the vector extensions matter

    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.machine(), "processor": platform.processor() or None,
        **cpu_description(),
        "cpus": os.cpu_count(), "threads": args.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "python": platform.python_version(), "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__, "transformers": transformers.__version__,
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--builtin", action="store_true")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--child", choices=("prepare", "export", "validate", "measure"))
    parser.add_argument("--variant")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.child:
        folder = args.dir
        result = {
            "prepare": lambda: prepare(args.variant, folder),
            "export": lambda: export(folder),
            "validate": lambda: validate(folder),
            "measure": lambda: measure(folder, args.rounds, args.threads, not args.no_compile),
        }[args.child]()
        print(json.dumps(result))
        return
    if "OMP_WAIT_POLICY" not in os.environ:  # libgomp reads it when torch loads
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; valid: {', '.join(VARIANTS)}")
    report: dict[str, Any] = {
        "environment": environment(args),
        "settings": {"model": "BertForSequenceClassification(BertConfig()), 2 labels",
                     "seq": SEQ, "batches": list(BATCHES), "rounds": args.rounds,
                     "parity_atol": PARITY_ATOL},
        "results": {},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [*variants, *(["builtin"] if args.builtin else [])]
    for variant in runs:
        with tempfile.TemporaryDirectory(prefix=f"bert_base_{variant}_") as tmp:
            folder = Path(tmp)
            entry: dict[str, Any] = {"prepare": child("prepare", variant, folder, args)}
            entry["export"] = child("export", variant, folder, args)
            if args.validate and "error" not in entry["export"]:
                entry["validate"] = child("validate", variant, folder, args)
            if variant != "builtin" and "error" not in entry["export"]:
                entry["measure"] = child("measure", variant, folder, args)
            report["results"][variant] = entry
            print(variant, json.dumps(entry)[:2000], flush=True)
        (args.out / "bert_base.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'bert_base.json'}")


if __name__ == "__main__":
    main()
