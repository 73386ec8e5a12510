"""Speed at real size: a fine-tuned all-MiniLM-L6-v2 per variant, PyTorch against onnxruntime.

    .venv/bin/python benchmarks/real_speed.py --checkpoints DIR [--variants ...] [--data FILE]
    .venv/bin/python benchmarks/real_speed.py --model MINILM_DIR        # fresh heads, no data

`--checkpoints DIR` holds one `train --hf-model` checkpoint per variant (`DIR/<variant>`, e.g.
from `benchmarks/pretrained.py --keep DIR`); `--data FILE` the labelled set they were trained on
(its held-out split, 20 % at split seed 0, judges int8's labels and accuracy). Without them,
`--model` converts MiniLM with a new head per variant (speed only), with the options `train
--hf-model` converts with (its preset: Evolving Attention mixes in the upper half only).

Backends, each at batch 1 x seq 32 and batch 8 x seq 128 (random ids, no padding), 2 threads:
- `eager`: the checkpoint's PyTorch model under `torch.inference_mode`, PyTorch's own threads
  (OpenMP spinning, as a user runs it);
- `compile`: `torch.compile` of it (inductor), where it compiles (recorded either way);
- `torch_int8`: `torch.ao.quantization.quantize_dynamic` on its Linear layers (qint8), what a
  PyTorch user tries first (with `--data`, also judged on the held-out texts as `quantize`
  judges onnxruntime's int8: labels equal to eager, accuracy);
- `ort`: the exported model in onnxruntime 1.32 (CPU, all graph optimizations, spinning on);
- `ort_int8`: the same after `attndeploy quantize` (dynamic, per channel; activations per row,
  quantize's default, or `--activations per-batch`).
- `ort_int8_kept` (with `--exclude-worst standard=1,ganet=4,...`): `quantize --exclude-worst N`'s
  file, the variant's N worst blocks kept in fp32 (what it takes to keep 99 % of the labels).
Interleaved rounds: each round runs every configuration in a fresh random order; before each
configuration the process sleeps 0.3 s (the previous one's spinning threads stop) and calls it
twice, then times `--calls` calls and keeps their median. Ratios are ratios of medians over the
rounds, with the per-round paired median beside them; the load average is recorded. Parity:
onnxruntime fp32 against eager (largest |logit difference|), int8 against fp32 (labels on the
benchmark inputs; with `--data`, `attndeploy quantize`'s label agreement and accuracy on the
held-out texts).

GA-Net's attention part (`--gate-scaling`): one `GatedAttention` node (gathers the open keys) and
its dense masked form, at MiniLM's heads (12 x 32), batch 8, density 0.3, seq 64 to 512.

Writes `real_speed.json` and `real_speed.png` (ratios to eager per variant and shape; the GA-Net
attention cost against seq).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from rich.console import Console
from rich.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import (  # noqa: E402
    Config,
    attention_part_model,
    compile_for_shapes,
    environment,
    summarise,
)

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.quantize.options import ACTIVATIONS  # noqa: E402

VARIANTS = ("standard", "qvi", "ganet", "evolving")
SHAPES = ((1, 32), (8, 128))
BACKENDS = ("eager", "compile", "torch_int8", "ort", "ort_int8", "ort_int8_kept")
TARGETS = {"ort": 1.2, "ort_int8": 2.0}  # speed-up over eager at every shape and variant
KEPT_TARGET = 2.0  # int8 with its worst blocks in fp32 (--exclude-worst), where given
GATE_SEQS = (64, 128, 256, 512)
console = Console(width=None if sys.stdout.isatty() else 160)


def per_label_counts(given: str) -> dict[str, int]:
    """{label: N} from `LABEL=N,...` (e.g. `--exclude-worst standard=1,ganet=4`)."""
    return {name: int(count) for name, count in
            (item.split("=", 1) for item in given.split(",") if item)}


def held_out_file(data: Path, target: Path, max_seq: int) -> Path:
    """The held-out split of `data` as `train --hf-model` makes it (split seed 0, 20 %)."""
    from attndeploy.data.held_out import held_out_of

    record = {"data_file": str(data), "eval_fraction": 0.2, "seed": 0}
    target.write_text(held_out_of(record, max_seq=max_seq, hf=True).to_jsonl())
    return target


def load_models(args: argparse.Namespace, variant: str, work: Path) -> dict[str, Any]:
    """The variant's PyTorch model (eval), its fp32 export and int8 file and quantize report."""
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.quantize import QuantizeOptions, quantize_model

    if args.checkpoints is not None:
        checkpoint = args.checkpoints / variant
    else:
        checkpoint = fresh_checkpoint(args.model, variant, work)
    model = read_checkpoint(checkpoint).model.eval()
    # quantize_dynamic copies a model unless in place, and a converted model's copy refuses to
    # run (its hooks belong to the original): quantize a second copy read from the checkpoint.
    torch_int8 = torch.ao.quantization.quantize_dynamic(
        read_checkpoint(checkpoint).model.eval(), {torch.nn.Linear}, dtype=torch.qint8,
        inplace=True)
    fp32 = work / f"{variant}.onnx"
    export_checkpoint(checkpoint, fp32)
    int8 = work / f"{variant}.int8.onnx"
    lax = {"threads": args.threads, "min_agreement": 0, "max_accuracy_drop": 1.0,
           "max_logit_change": 1e9,  # measured and recorded here, never refused
           "activations": args.activations}
    result = quantize_model(fp32, int8, QuantizeOptions(**lax), data=args.held_out)
    models = {"model": model, "torch_int8": torch_int8, "fp32": fp32, "int8": int8,
              "quantize": result.to_dict()}
    kept = args.exclude_worst.get(variant)
    if kept:  # the int8 file `quantize --exclude-worst N` writes: N blocks kept in fp32
        models["int8_kept"] = work / f"{variant}.int8-kept{kept}.onnx"
        models["quantize_kept"] = quantize_model(
            fp32, models["int8_kept"], QuantizeOptions(exclude_worst=kept, **lax),
            data=args.held_out).to_dict()
    return models


def torch_int8_on_texts(models: dict[str, Any], held_out: Path) -> dict[str, Any]:
    """PyTorch's dynamic int8 against eager on the held-out texts, tokenized as `predict` does
    (`quantizer.text_feeds`): labels equal and accuracy, as `quantize` judges onnxruntime's."""
    from attndeploy.interface import ATTENTION_MASK, INPUT_IDS
    from attndeploy.quantize.check import read_labelled
    from attndeploy.quantize.quantizer import text_feeds
    from attndeploy.runtime import InferenceModel

    reader = InferenceModel(models["fp32"])  # the export's tokenizer, labels and max_seq
    texts, gold = read_labelled(held_out, reader.labels)
    eager: list[int] = []
    int8: list[int] = []
    with torch.inference_mode():
        for feed in text_feeds(reader, texts):
            ids, mask = torch.from_numpy(feed[INPUT_IDS]), torch.from_numpy(feed[ATTENTION_MASK])
            eager += models["model"](ids, mask)["logits"].argmax(-1).tolist()  # [B]
            int8 += models["torch_int8"](ids, mask)["logits"].argmax(-1).tolist()  # [B]
    n = len(texts)
    return {"texts": n,
            "labels_equal_eager": sum(a == b for a, b in zip(eager, int8, strict=True)) / n,
            "eager_accuracy": sum(a == g for a, g in zip(eager, gold, strict=True)) / n,
            "int8_accuracy": sum(b == g for b, g in zip(int8, gold, strict=True)) / n}


def fresh_checkpoint(model_dir: Path, variant: str, work: Path) -> Path:
    """MiniLM converted to `variant` with a new 8-label head, saved as a checkpoint: converted
    with the options `train --hf-model` uses, so the speed measured is that of what it trains."""
    import transformers

    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer
    from attndeploy.integrations.transformers import convert
    from attndeploy.integrations.warm_start import set_warm_start_progress
    from attndeploy.training.config import PRETRAINED_DEFAULTS

    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification.from_pretrained(
        str(model_dir), num_labels=8, local_files_only=True, use_safetensors=True)
    convert(hf, variant, **PRETRAINED_DEFAULTS.options_for(variant))
    set_warm_start_progress(hf, 1.0)
    labels = [f"label{i}" for i in range(8)]
    return save_hf_checkpoint(HFClassifier(hf, model_config_of(hf, 128)), work / f"ckpt_{variant}",
                              label_names=labels,
                              tokenizer=WordPieceTokenizer.from_directory(model_dir))


def session(path: Path, threads: int) -> ort.InferenceSession:
    from attndeploy.runtime.sessions import create_session

    return create_session(path, threads=threads)


def inputs(batch: int, seq: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch, seq), generator=generator)  # [B, T]
    return ids, torch.ones(batch, seq, dtype=torch.long)


def variant_configs(variant: str, models: dict[str, Any], args: argparse.Namespace,
                    record: dict[str, Any]) -> list[Config]:
    model = models["model"]
    vocab = model.config.vocab_size
    shapes = {shape: inputs(*shape, vocab, seed=shape[0] * 1000 + shape[1]) for shape in SHAPES}
    fp32 = session(models["fp32"], args.threads)
    int8 = session(models["int8"], args.threads)
    kept = session(models["int8_kept"], args.threads) if "int8_kept" in models else None
    torch_int8 = models["torch_int8"]
    compiled = None
    if not args.no_compile:
        compiled, record["compile"] = compile_for_shapes(model, shapes)
    configs = []
    record["parity"] = {}
    for (batch, seq), (ids, mask) in shapes.items():
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        with torch.inference_mode():
            want = model(ids, mask)["logits"].numpy()
            got_int8_torch = torch_int8(ids, mask)["logits"].numpy()
        got = fp32.run(["logits"], feed)[0]
        got_int8 = int8.run(["logits"], feed)[0]
        record["parity"][f"b{batch}_s{seq}"] = {
            "ort_max_abs_diff": float(np.abs(got - want).max()),
            "ort_int8_labels_equal_fp32": float((got_int8.argmax(-1) == got.argmax(-1)).mean()),
            "torch_int8_labels_equal_eager": float(
                (got_int8_torch.argmax(-1) == want.argmax(-1)).mean()),
        }

        def eager(ids=ids, mask=mask):
            with torch.inference_mode():
                return model(ids, mask)

        def quantized(ids=ids, mask=mask):
            with torch.inference_mode():
                return torch_int8(ids, mask)

        calls = {"eager": eager, "torch_int8": quantized,
                 "ort": lambda feed=feed: fp32.run(["logits"], feed),
                 "ort_int8": lambda feed=feed: int8.run(["logits"], feed)}
        if kept is not None:
            calls["ort_int8_kept"] = lambda feed=feed: kept.run(["logits"], feed)
        if compiled is not None:
            def compiled_call(ids=ids, mask=mask):
                with torch.inference_mode():
                    return compiled(ids, mask)

            calls["compile"] = compiled_call
        configs += [Config(variant, backend, batch, seq, call) for backend, call in calls.items()]
    return configs


def gate_scaling_configs(args: argparse.Namespace) -> list[Config]:
    """GA-Net's attention part: gathered open keys against dense masking, vs seq."""
    from attndeploy.runtime.sessions import create_session

    sessions = {dense: create_session(attention_part_model(dense), threads=args.threads)
                for dense in (False, True)}
    configs = []
    rng = np.random.default_rng(0)
    for seq in GATE_SEQS:
        shape = (8, 12, seq, 32)  # MiniLM: 12 heads of 32
        feed = {n: rng.standard_normal(shape, dtype=np.float32) for n in ("query", "key", "value")}
        is_open = rng.random((8, seq)) < args.gate_density
        feed["gate_logits"] = np.where(is_open, 1.0, -1.0).astype(np.float32)
        feed["key_padding_mask"] = np.ones((8, seq), dtype=bool)
        for dense, name in ((False, "gather"), (True, "dense")):
            configs.append(Config("ganet_attention", name, 8, seq,
                                  lambda s=sessions[dense], f=feed: s.run(None, f)))
    return configs


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
                samples = []
                for _ in range(args.calls):
                    t0 = time.perf_counter_ns()
                    config.call()
                    samples.append((time.perf_counter_ns() - t0) / 1e6)
                config.samples.append(statistics.median(samples))
                bar.advance(task)
            if round_index >= 3 and time.perf_counter() - started > args.budget_s:
                return round_index
    return args.rounds


def ratios(configs: list[Config]) -> dict[str, Any]:
    by_key = {(c.group, c.backend, c.batch, c.seq): c for c in configs}
    out: dict[str, Any] = {}
    for (group, backend, batch, seq), config in by_key.items():
        base = by_key.get((group, "eager" if group != "ganet_attention" else "dense", batch, seq))
        if base is None or base is config or not config.samples:
            continue
        paired = [b / c for b, c in zip(base.samples, config.samples, strict=False)]
        out[f"{group}/{backend}/b{batch}_s{seq}"] = {
            "speedup": statistics.median(base.samples) / statistics.median(config.samples),
            "paired_median": statistics.median(paired)}
    return out


def targets(speedups: dict[str, Any], variants: list[str]) -> list[dict[str, Any]]:
    checks = []
    for backend, want in TARGETS.items():
        for variant in variants:
            for batch, seq in SHAPES:
                entry = speedups.get(f"{variant}/{backend}/b{batch}_s{seq}")
                value = entry["speedup"] if entry else None
                checks.append({"target": f"{backend} >= {want}x eager", "variant": variant,
                               "shape": f"b{batch}_s{seq}", "value": value,
                               "met": value is not None and value >= want})
    for variant in variants:
        for batch, seq in SHAPES:
            entry = speedups.get(f"{variant}/ort_int8_kept/b{batch}_s{seq}")
            if entry is not None:
                checks.append({"target": f"ort_int8_kept >= {KEPT_TARGET}x eager",
                               "variant": variant, "shape": f"b{batch}_s{seq}",
                               "value": entry["speedup"], "met": entry["speedup"] >= KEPT_TARGET})
    gather = speedups.get(f"ganet_attention/gather/b8_s{GATE_SEQS[-1]}")
    if gather is not None:
        checks.append({"target": "GA-Net attention, gathered <= 0.5x dense at seq 512",
                       "variant": "ganet", "shape": "b8_s512",
                       "value": 1 / gather["speedup"], "met": 1 / gather["speedup"] <= 0.5})
    return checks


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    variants = report["variants"]
    backends = [b for b in BACKENDS if b != "eager"]
    width = 0.8 / max(1, len(backends))
    labels = [f"{v}\nb{b}s{s}" for v in variants for b, s in SHAPES]
    for k, backend in enumerate(backends):
        values = [report["speedups"].get(f"{v}/{backend}/b{b}_s{s}", {}).get("speedup", 0)
                  for v in variants for b, s in SHAPES]
        left.bar(np.arange(len(labels)) + k * width, values, width, label=backend)
    for want, style in ((1.2, ":"), (2.0, "--")):
        left.axhline(want, color="gray", ls=style, lw=1)
    left.axhline(1.0, color="black", lw=0.8)
    left.set_xticks(np.arange(len(labels)) + width * (len(backends) - 1) / 2, labels,
                    fontsize=7)
    left.set_ylabel("speed-up over eager PyTorch (x)")
    left.set_title("all-MiniLM-L6-v2, 2 threads (dotted 1.2x, dashed 2x)")
    left.legend(fontsize=7)
    scaling = report.get("gate_scaling", {})
    if scaling:
        for name in ("gather", "dense"):
            right.plot(GATE_SEQS, [scaling[f"{name}/s{s}"] for s in GATE_SEQS], marker="o",
                       label=name)
        right.set_xlabel("sequence length")
        right.set_ylabel("ms per call (batch 8, 12 heads)")
        right.set_title("GA-Net attention part, density "
                        f"{report['gate_density']:g}:\ngathered open keys vs dense mask")
        right.legend()
    else:  # --no-gate-scaling
        right.axis("off")
    fig.tight_layout()
    atomic_write_png(fig, path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=Path)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--data", type=Path, help="the labelled set the checkpoints trained on")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.3)
    parser.add_argument("--budget-s", type=float, default=1200)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--exclude-worst", default="", metavar="VARIANT=N,...",
                        help="also time int8 with each variant's N worst blocks in fp32 "
                             "(quantize --exclude-worst), e.g. standard=1,ganet=4")
    parser.add_argument("--activations", choices=ACTIVATIONS, default=None,
                        help="quantize --activations (default: quantize's, per row; the tables "
                             "before 2026-12-05 were measured per batch)")
    parser.add_argument("--gate-density", type=float, default=0.3)
    parser.add_argument("--no-gate-scaling", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = parser.parse_args()
    if (args.checkpoints is None) == (args.model is None):
        parser.error("give --checkpoints DIR or --model MINILM_DIR")
    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    args.exclude_worst = per_label_counts(args.exclude_worst)
    work = Path(tempfile.mkdtemp(prefix="attndeploy-real-speed-"))
    try:
        measure_and_report(args, variants, work)
    finally:  # the checkpoints, exports and int8 files: about 700 MB for the four variants
        shutil.rmtree(work, ignore_errors=True)


def measure_and_report(args: argparse.Namespace, variants: list[str], work: Path) -> None:
    args.held_out = (held_out_file(args.data, work / "held_out.jsonl", 128)
                     if args.data is not None else None)
    env = environment(args.threads)
    env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "(unset: spinning)")
    env["ort_session"]["session.intra_op.allow_spinning"] = "1 (default)"
    records: dict[str, Any] = {}
    configs: list[Config] = []
    for variant in variants:
        console.print(f"preparing {variant}: export, quantize, torch int8, compile")
        models = load_models(args, variant, work)
        records[variant] = {"quantize": models["quantize"],
                            "quantize_kept": models.get("quantize_kept")}
        if args.held_out is not None:
            texts = records[variant]["torch_int8_texts"] = torch_int8_on_texts(models,
                                                                               args.held_out)
            console.print(f"{variant}: torch int8 labels equal eager on "
                          f"{texts['labels_equal_eager']:.2%} of {texts['texts']} held-out "
                          f"texts, accuracy {texts['eager_accuracy']:.4f} -> "
                          f"{texts['int8_accuracy']:.4f}")
        configs += variant_configs(variant, models, args, records[variant])
    if not args.no_gate_scaling:
        configs += gate_scaling_configs(args)
    load_before = os.getloadavg()
    rounds = timed_rounds(configs, args)
    speedups = ratios(configs)
    report = {
        "benchmark": "real_speed", "environment": env, "rounds": rounds, "calls": args.calls,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "variants": variants, "gate_density": args.gate_density,
        "timings": {c.key: summarise(c.samples) for c in configs},
        "speedups": speedups, "records": records,
        "gate_scaling": {f"{c.backend}/s{c.seq}": statistics.median(c.samples)
                         for c in configs if c.group == "ganet_attention"},
    }
    report["targets"] = targets(speedups, variants)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "real_speed.json", json.dumps(report, indent=2) + "\n")
    plot(report, args.out / "real_speed.png")
    for key, value in sorted(speedups.items()):
        console.print(f"{key:40s} {value['speedup']:6.2f}x (paired {value['paired_median']:.2f})")
    for check in report["targets"]:
        mark = "met" if check["met"] else "NOT met"
        value = "-" if check["value"] is None else f"{check['value']:.2f}"
        console.print(f"{check['target']:48s} {check['variant']:9s} {check['shape']:8s} "
                      f"{value:>6s} {mark}")


if __name__ == "__main__":
    main()
