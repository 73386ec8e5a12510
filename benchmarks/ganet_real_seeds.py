"""GA-Net on the real-text sets over training seeds, with variations of its defaults.

One run of `train_real.py` is one seed, and on these sets the held-out accuracy moves by about
±1.5 points between seeds, which is as much as GA-Net's margin over the baseline. This script
trains GA-Net with the `--data` defaults and with variations (`--variants`) for several seeds
(`--seeds`) on the same split as `train_real.py` (variations join with '+', e.g.
`tau0.5+word_dropout0.2`), and writes one JSON record per run to
`benchmarks/results/ganet_real_seeds.json` (accuracy, held-out density, CPU seconds).

    .venv/bin/python benchmarks/real_text.py            # once: the data sets
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/ganet_real_seeds.py --sets fortunes \
        --variants default,dense,previous --seeds 0,1,2,3,4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import train_real  # noqa: E402  (the same split and loader)

from attndeploy.config import ModelConfig  # noqa: E402
from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.train import train  # noqa: E402
from attndeploy.training.config import REAL_TEXT_DEFAULTS, TrainConfig  # noqa: E402
from attndeploy.variants.ganet.config import GANetConfig  # noqa: E402

# label -> (GANetConfig fields, TrainConfig fields[, ModelConfig fields]) changed from the --data
# defaults (BiLSTM gate network, hard-concrete gates, no word dropout, refit, distillation from
# the dense-gate run)
VARIATIONS: dict[str, tuple[dict, ...]] = {
    "default": ({}, {}),
    # the reference: gates open, and nothing to learn from but the labels
    "dense": ({"density_weight": 0.0}, {"density_target": None, "distill": 0.0}),
    "no_distill": ({}, {"distill": 0.0}),
    "distill0.3": ({}, {"distill": 0.3}),
    "distill0.7": ({}, {"distill": 0.7}),
    "mlp_gates": ({"aux": "mlp"}, {}),
    "conv_gates": ({"aux": "conv"}, {}),
    "word_dropout0.2": ({}, {"word_dropout": 0.2}),
    "tau0.5": ({"temperature": 0.5}, {}),
    "straight_through": ({"straight_through": True}, {}),
    "target0.35": ({}, {"density_target": 0.35}),
    "calibrate0.39": ({}, {"density_calibrate": 0.39}),
    "concrete": ({"relaxation": "concrete"}, {}),
    "no_refit": ({}, {"refit": False}),
    "dropout0.3": ({}, {}, {"dropout": 0.3}),
    "dropout0.2": ({}, {}, {"dropout": 0.2}),
    "patience6": ({}, {"patience": 6, "max_epochs": 30}),
    "lstm_hidden200": ({}, {}, {"lstm_hidden": 200}),
    "bilstm_family": ({}, {}, {"family": "bilstm"}),  # the paper's model: BiLSTM backbone
    "rate0.1": ({}, {"density_rate": 0.1}),
    "target0.37": ({}, {"density_target": 0.37}),
}
# Earlier defaults, named: before distillation; before the BiLSTM gate network and no word
# dropout too; and before hard concrete and the refit as well.
ALIASES = {
    "before_distill": "no_distill",
    "previous": "before_distill+mlp_gates+word_dropout0.2",
    "before_hard_concrete": "previous+concrete+no_refit",
}
OUT = ROOT / "benchmarks" / "results" / "ganet_real_seeds.json"


def combined(label: str) -> tuple[dict, dict, dict]:
    """The (gate, training, model) changes of one variation or alias, or of several joined by
    '+' (`tau0.5+word_dropout0.2`); later parts win."""
    gates: dict = {}
    training: dict = {}
    model: dict = {}
    for part in label.split("+"):
        if part in ALIASES:
            part_gates, part_training, part_model = combined(ALIASES[part])
        elif part in VARIATIONS:
            part_gates, part_training, part_model = (*VARIATIONS[part], {})[:3]
        else:
            known = ", ".join([*VARIATIONS, *ALIASES])
            raise SystemExit(f"unknown variation {part!r}; known: {known}")
        gates, training = {**gates, **part_gates}, {**training, **part_training}
        model = {**model, **part_model}
    return gates, training, model


def configs(data, label: str, seed: int) -> tuple[ModelConfig, TrainConfig]:
    """GA-Net's model and training configs for one variation of the `--data` defaults, as
    `train_real.py` builds them for `data` (a `TrainingData`)."""
    gates, training_changes, model_changes = combined(label)
    training = dataclasses.replace(REAL_TEXT_DEFAULTS.training_for("ganet"), seed=seed,
                                   **training_changes)
    config = ModelConfig(vocab_size=len(data.tokenizer), num_labels=len(data.label_names),
                         variant="ganet", head=data.head, max_seq=128,
                         **{**REAL_TEXT_DEFAULTS.model, **model_changes},
                         ganet=GANetConfig(**{**REAL_TEXT_DEFAULTS.ganet, **gates}))
    return config, training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="fortunes,debian")
    parser.add_argument("--variants", default="default,dense")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--data-dir", type=Path,
                        default=ROOT / "benchmarks" / "results" / "real_text")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    split = json.loads((args.data_dir / "manifest.json").read_text())["split"]
    runs = []
    for name in args.sets.split(","):
        data = train_real._load(args.data_dir, name, split)
        for label in args.variants.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                config, training = configs(data, label, seed)
                cpu = time.process_time()
                result = train(config, data.train_set, data.eval_set, training, progress=False,
                               val_set=data.val_set)
                runs.append({"set": name, "variation": label, "seed": seed,
                             "accuracy": round(result.metrics["accuracy"], 4),
                             "density": round(result.metrics["density"], 3),
                             "best_epoch": result.metrics["best_epoch"],
                             "cpu_seconds": round(time.process_time() - cpu, 1)})
                print(json.dumps(runs[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps({"runs": runs}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
