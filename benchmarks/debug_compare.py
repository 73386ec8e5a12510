"""`attndeploy debug compare` against `attndeploy validate` at BERT-base size: is the layer-by-layer
comparison within 2x the time of a validation of the same model?

The model is `transformers.BertForSequenceClassification(BertConfig())` (BERT-base: 12 layers,
hidden 768, 12 heads, FFN 3072; 2 labels; random weights, seed 0) converted to `--variant`
(default evolving) with `attndeploy.integrations.transformers.convert`, saved as an attndeploy
checkpoint (max_seq 128, the recipe of `bert_base.py` with the variant's own initialisation)
and exported once. A copy of the
export gets a planted bug (layer `--plant` of the evolving chain calls its own copy of its
function, whose `scale` constant is changed), so that the look inside a function is timed too.

Then, in `--rounds` rounds, each in a fresh random order, every command runs as a subprocess
(imports included, as a user meets them), its wall seconds and the load average before it
recorded:

- `validate`: `attndeploy validate CKPT MODEL` with its defaults (the shape grid up to max_seq,
  onnxruntime with all and with no optimizations, the ONNX reference evaluator on the small
  shapes, the padding check);
- `debug`: `attndeploy debug compare CKPT MODEL` with its defaults (one 4 x 17 batch);
- `debug_grid`: `debug compare` on validate's whole default grid (`--shapes`), the same inputs
  validate runs (the fair comparison of work per shape);
- `debug_planted`: `debug compare` on the planted copy (defaults), which also inlines the
  diverging node's body and runs it in onnxruntime and the reference evaluator; its verdict is
  recorded.

Ratios are medians of the per-round ratios against `validate` (interleaved, so the load hits
all alike). The machine's load average is recorded at the start and before every command.

Run: `.venv/bin/python benchmarks/debug_compare.py [--variant evolving] [--rounds 2]
[--plant 6] [--out DIR]`. Writes DIR/debug_compare.json (DIR: benchmarks/results/). Needs the
`hf` extra and about 1.5 GB of free disk in the temp folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ATTNDEPLOY = [sys.executable, "-m", "attndeploy"]
MAX_SEQ = 128
LABELS = ("negative", "positive")


def prepare(variant: str, folder: Path) -> dict[str, Any]:
    """The BERT-base checkpoint (bert_base.py's recipe, the variant's own initialisation:
    `warm_start=False`) and its export."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.transformers import convert

    torch.manual_seed(0)
    model = convert(BertForSequenceClassification(BertConfig(num_labels=2)).eval(), variant,
                    warm_start=False)
    save_hf_checkpoint(HFClassifier(model, model_config_of(model, MAX_SEQ)),
                       folder / "checkpoint", label_names=LABELS)
    started = time.perf_counter()
    result = export_checkpoint(folder / "checkpoint", folder / "model.onnx")
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "export_s": round(time.perf_counter() - started, 1),
            "custom_nodes": result.custom_nodes,
            "onnx_mb": round((folder / "model.onnx").stat().st_size / 2**20)}


def plant(source: Path, target: Path, layer: int) -> str:
    """A copy of `source` whose `layer`-th attndeploy node calls its own copy of its function
    with the `scale` constant changed (only that layer computes differently)."""
    import onnx

    model = onnx.load(str(source))
    node = [n for n in model.graph.node if n.domain == "attndeploy"][layer]
    function = next(f for f in model.functions
                    if (f.domain, f.name, f.overload) == (node.domain, node.op_type, ""))
    copy = onnx.FunctionProto()
    copy.CopyFrom(function)
    copy.overload = "planted"
    for inner in copy.node:
        for attribute in inner.attribute:
            if attribute.ref_attr_name == "scale":
                attribute.ref_attr_name = ""
                attribute.f = 0.9
                edited = inner.name
    model.functions.append(copy)
    node.overload = "planted"
    onnx.save(model, str(target))
    return edited


def grid() -> str:
    from attndeploy.validate.grid import default_grid

    return ",".join(str(shape) for shape in default_grid(MAX_SEQ))


def run(name: str, argv: list[str], folder: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run([*ATTNDEPLOY, *argv], capture_output=True, text=True, cwd=folder,
                          check=False)
    seconds = time.perf_counter() - started
    entry: dict[str, Any] = {"seconds": round(seconds, 2), "load_before": round(load, 2),
                             "exit_code": done.returncode}
    report = folder / f"{name}.json"
    if report.is_file():
        data = json.loads(report.read_text())
        entry["passed"] = data.get("passed")
        entry["verdict"] = data.get("verdict")
        entry["timings"] = data.get("timings")
    if done.returncode not in (0, 1) or "verdict" not in entry:
        entry["stderr"] = done.stderr.strip().splitlines()[-3:]
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="evolving")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plant", type=int, default=6, help="attndeploy node to plant a bug in")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    if "OMP_WAIT_POLICY" not in os.environ:  # as bert_base.py: no spinning OpenMP threads
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    import onnxruntime
    import torch

    report: dict[str, Any] = {
        "environment": {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__, "load_average_start": os.getloadavg(),
        },
        "settings": {"model": "BertForSequenceClassification(BertConfig()), 2 labels",
                     "variant": args.variant, "max_seq": MAX_SEQ, "rounds": args.rounds,
                     "planted_layer": args.plant, "grid": grid()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="debug_compare_") as tmp:
        folder = Path(tmp)
        report["model"] = prepare(args.variant, folder)
        report["model"]["planted_at"] = plant(folder / "model.onnx", folder / "planted.onnx",
                                              args.plant)
        commands = {
            "validate": ["validate", "checkpoint", "model.onnx", "--json-out", "validate.json"],
            "debug": ["debug", "compare", "checkpoint", "model.onnx", "--json-out",
                      "debug.json"],
            "debug_grid": ["debug", "compare", "checkpoint", "model.onnx", "--shapes", grid(),
                           "--json-out", "debug_grid.json"],
            "debug_planted": ["debug", "compare", "checkpoint", "planted.onnx", "--json-out",
                              "debug_planted.json"],
        }
        rounds: list[dict[str, Any]] = []
        rng = random.Random(args.seed)
        for index in range(args.rounds):
            order = list(commands)
            rng.shuffle(order)
            entry = {"order": order}
            for name in order:
                entry[name] = run(name, commands[name], folder)
                print(f"round {index} {name}: {json.dumps(entry[name])[:300]}", flush=True)
            rounds.append(entry)
            report["rounds"] = rounds
            (args.out / "debug_compare.json").write_text(json.dumps(report, indent=2) + "\n")
    summary: dict[str, Any] = {}
    for name in commands:
        times = [r[name]["seconds"] for r in rounds]
        summary[name] = {"median_s": round(statistics.median(times), 2), "all_s": times}
        if name != "validate":
            ratios = [r[name]["seconds"] / r["validate"]["seconds"] for r in rounds]
            summary[name]["ratio_to_validate"] = round(statistics.median(ratios), 3)
    report["summary"] = summary
    report["environment"]["load_average_end"] = os.getloadavg()
    (args.out / "debug_compare.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out / 'debug_compare.json'}")


if __name__ == "__main__":
    main()
