"""int8 against fp32 over `quantize`'s knobs, on fine-tuned checkpoints and their held-out texts.

    .venv/bin/python benchmarks/quantize_sweep.py --checkpoint [LABEL=]CKPT [--checkpoint ...]
        --data FILE [--n 0,1,2,3,4,5] [--activations per-batch,per-row] [--bits 8,7] [--out DIR]

Each checkpoint (a `train --hf-model` one, e.g. from `pretrained.py --keep`; LABEL defaults to
its folder's name) is exported once, then quantized (`quantize_model`: dynamic, per channel) once
per setting: activations scaled per batch or per row (`--activations`, each of the list), N worst
blocks kept in fp32 (`--exclude-worst N`, each of `--n`), 8- or 7-bit weights (`--reduce-range`;
each of `--bits`) and, for GA-Net, its gate network in fp32 (the default) or in int8
(`--gate-network-int8`). The tolerances are lifted, so every file is written and judged on the
held-out texts of FILE (split seed 0, 20 %, as `train --hf-model` makes it): labels equal to
fp32, held-out accuracy, and for GA-Net the hard gates flipped on those texts and on the shape
grid. Writes `quantize_sweep.json` (with the CPU's vector extensions: whether it has VNNI decides
whether 8-bit kernels can saturate) and `quantize_sweep.png` (labels equal fp32 against N, one
panel per checkpoint, 99 % marked), and prints per checkpoint and activation scaling the fewest
blocks in fp32 that pass `quantize`'s own tolerances. Its work folder (exports, int8 files) is
removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import cpu_description  # noqa: E402
from real_speed import held_out_file  # noqa: E402
from served_int8 import checkpoint_labels  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.quantize import QuantizeOptions, quantize_model  # noqa: E402
from attndeploy.quantize.options import ACTIVATIONS  # noqa: E402

# quantize's own tolerances: what the sweep is read against
DEFAULTS = QuantizeOptions()
MIN_AGREEMENT = DEFAULTS.min_agreement
MAX_ACCURACY_DROP = DEFAULTS.max_accuracy_drop
MAX_LOGIT_CHANGE = DEFAULTS.max_logit_change
TRAIN_MAX_SEQ = 128  # `train --hf-model`'s --max-seq, which its held-out split depends on


def settings(gated: bool, counts: list[int], activations: list[str], bits: list[int]
             ) -> list[dict[str, Any]]:
    """Every combination to quantize with: activation scales, bits, gate network (GA-Net
    only), N."""
    gate_choices = (True, False) if gated else (True,)
    return [{"activations": scaling, "reduce_range": width == 7,
             "gate_network_fp32": gate_fp32, "exclude_worst": n}
            for scaling in activations for width in bits for gate_fp32 in gate_choices
            for n in counts]


def quantize_once(source: Path, target: Path, texts_file: Path, setting: dict[str, Any]
                  ) -> dict[str, Any]:
    """One int8 file of `source` with `setting`, judged against fp32; the file is removed."""
    options = QuantizeOptions(min_agreement=0.0, max_accuracy_drop=1.0, max_logit_change=1e9,
                              force=True, **setting)
    chosen = quantize_model(source, target, options, data=texts_file).chosen
    target.unlink()
    data, grid = chosen.data, chosen.grid
    return {**setting, "label_agreement": data.label_agreement, "texts": data.texts,
            "fp32_accuracy": data.fp32_accuracy, "int8_accuracy": data.int8_accuracy,
            "text_gate_flips": data.gate_flips, "text_gates": data.gates,
            "grid_gate_flips": grid.gate_flips, "grid_label_agreement": grid.label_agreement,
            "max_logit_change": grid.max_logit_change,
            "int8_matmuls": chosen.quantized_nodes, "fp32_matmuls": len(chosen.excluded),
            "gate_network": chosen.gate_network}


def fewest_passing(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Per activation scaling, the passing setting with the fewest blocks in fp32, 8-bit
    before 7-bit."""
    passing = [r for r in rows if r["label_agreement"] >= MIN_AGREEMENT
               and r["fp32_accuracy"] - r["int8_accuracy"] <= MAX_ACCURACY_DROP
               and r["max_logit_change"] <= MAX_LOGIT_CHANGE]
    return {scaling: min((r for r in passing if r["activations"] == scaling),
                         key=lambda r: (r["exclude_worst"], r["reduce_range"],
                                        not r["gate_network_fp32"]), default=None)
            for scaling in dict.fromkeys(r["activations"] for r in rows)}


def setting_name(row: dict[str, Any]) -> str:
    name = f"{row['activations']}, {'7-bit' if row['reduce_range'] else '8-bit'}"
    if row["text_gate_flips"] is None:
        return name
    return f"{name}, gate network {'fp32' if row['gate_network_fp32'] else 'int8'}"


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Labels equal to fp32 against N, one line per setting, one panel per checkpoint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.8),
                                squeeze=False, sharey=True)
    for axis, (label, rows) in zip(axes[0], results.items(), strict=True):
        for name in dict.fromkeys(setting_name(r) for r in rows):
            mine = [r for r in rows if setting_name(r) == name]
            # colour: the weights' bits; marker: activation scales; dashed: GA-Net's gate
            # network in int8
            axis.plot([r["exclude_worst"] for r in mine],
                      [100 * r["label_agreement"] for r in mine], label=name,
                      marker="s" if mine[0]["activations"] == "per-row" else "o",
                      color="tab:orange" if mine[0]["reduce_range"] else "tab:blue",
                      linestyle="-" if mine[0]["gate_network_fp32"] else "--")
        axis.axhline(100 * MIN_AGREEMENT, color="grey", linestyle=":", linewidth=1)
        axis.set_title(label)
        axis.set_xlabel("blocks kept in fp32 (--exclude-worst N)")
        axis.set_xticks(sorted({r["exclude_worst"] for r in rows}))
        axis.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("labels equal fp32 (%)")
    figure.tight_layout()
    atomic_write_png(figure, path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True, metavar="[LABEL=]PATH")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--n", default="0,1,2,3,4,5", help="the --exclude-worst values")
    parser.add_argument("--activations", default="per-batch,per-row",
                        help="the --activations scalings")
    parser.add_argument("--bits", default="8,7", help="weight bits: 8, and 7 (--reduce-range)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    counts = [int(n) for n in args.n.split(",") if n.strip()]
    activations = [a.strip() for a in args.activations.split(",") if a.strip()]
    bits = [int(b) for b in args.bits.split(",") if b.strip()]
    if not set(bits) <= {7, 8}:
        parser.error(f"--bits takes 8 and 7, got {args.bits}")
    if not set(activations) <= set(ACTIVATIONS):
        parser.error(f"--activations takes {', '.join(ACTIVATIONS)}, got {args.activations}")
    checkpoints = checkpoint_labels(args.checkpoint)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="attndeploy-quantize-sweep-"))
    try:
        report = sweep(checkpoints, args.data, counts, activations, bits, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    atomic_write_text(args.out / "quantize_sweep.json", json.dumps(report, indent=1) + "\n")
    plot(report["results"], args.out / "quantize_sweep.png")
    for label, rows in report["results"].items():
        print(label)
        for row in rows:
            flips = ("" if row["text_gate_flips"] is None else
                     f"  gates flipped {row['text_gate_flips']}/{row['text_gates']} texts, "
                     f"{row['grid_gate_flips']} grid")
            print(f"  {setting_name(row):38s} N={row['exclude_worst']}  labels "
                  f"{row['label_agreement']:.2%}  accuracy {row['fp32_accuracy']:.4f} -> "
                  f"{row['int8_accuracy']:.4f}{flips}")
        for scaling, best in report["fewest_passing"][label].items():
            chosen = f"{setting_name(best)}, N={best['exclude_worst']}" if best else "none"
            print(f"  fewest that pass, {scaling}: {chosen}")
    print(f"wrote {args.out / 'quantize_sweep.json'} and {args.out / 'quantize_sweep.png'}")


def sweep(checkpoints: dict[str, Path], data: Path, counts: list[int], activations: list[str],
          bits: list[int], work: Path) -> dict[str, Any]:
    from rich.progress import Progress

    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.runtime import InferenceModel

    load_before = os.getloadavg()
    results: dict[str, list[dict[str, Any]]] = {}
    with Progress() as progress:
        task = progress.add_task("quantizing", total=None)
        for label, checkpoint in checkpoints.items():
            source = export_checkpoint(checkpoint, work / f"{label}.onnx").path
            model = InferenceModel(source)
            texts_file = held_out_file(data, work / f"{label}_held_out.jsonl", TRAIN_MAX_SEQ)
            planned = settings(model.gated, counts, activations, bits)
            progress.update(task, total=(progress.tasks[0].total or 0) + len(planned))
            results[label] = []
            for setting in planned:
                progress.update(task, description=f"{label} {setting}")
                results[label].append(quantize_once(source, work / "int8.onnx", texts_file,
                                                     setting))
                progress.advance(task)
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **cpu_description(), "load_before": load_before, "load_after": os.getloadavg(),
        "data": str(data), "min_agreement": MIN_AGREEMENT,
        "max_accuracy_drop": MAX_ACCURACY_DROP, "max_logit_change": MAX_LOGIT_CHANGE,
        "results": results,
        "fewest_passing": {label: fewest_passing(rows) for label, rows in results.items()},
    }


if __name__ == "__main__":
    main()
