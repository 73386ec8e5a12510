"""Training benchmark: held-out accuracy against training time, every variant, one run.

Target (issue "Foundation"): with the default small model (d_model 64, 4 heads, 2 layers) on the
default sparse-evidence task, every variant reaches >= 95 % held-out accuracy within 60 s of
training on 2 CPU cores, GA-Net with gate density <= 0.35.

    .venv/bin/python benchmarks/train.py [--out benchmarks/results] [--budget 60] [--quick]

Writes `train.json` (per variant: time to target, accuracy curve, final metrics) and `train.png`.
Evaluation time is excluded from the training time (the evaluation runs every `--eval-every`
steps). Variants run one after another in one process with the same thread count.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.config import ModelConfig  # noqa: E402
from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.train import TrainConfig, load_training_data, train  # noqa: E402

VARIANTS = ("standard", "qvi", "ganet", "evolving")
TARGET_ACCURACY = 0.95
TARGET_DENSITY = 0.35


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    data = load_training_data(task="sparse_evidence", seed=args.seed, max_seq=64)
    results = {}
    for variant in args.variants:
        config = ModelConfig(vocab_size=len(data.tokenizer), num_labels=len(data.label_names),
                             variant=variant, head=data.head, max_seq=64)
        train_config = TrainConfig(steps=args.steps, seed=args.seed, max_seconds=args.budget)
        started = time.perf_counter()
        result = train(config, data.train_set, data.eval_set, train_config, progress=True,
                       eval_every=args.eval_every)
        wall = time.perf_counter() - started
        reached = next(
            (e for e in result.evaluations if e["accuracy"] >= TARGET_ACCURACY
             and (variant != "ganet" or e["density"] <= TARGET_DENSITY)), None)
        results[variant] = {
            "time_to_target_s": reached["train_seconds"] if reached else None,
            "step_at_target": reached["step"] if reached else None,
            "final": result.metrics,
            "train_seconds": result.summary["seconds"],
            "steps_done": result.summary["steps_done"],
            "wall_seconds_with_evaluation": round(wall, 2),
            "curve": [{k: e[k] for k in ("step", "train_seconds", "accuracy")}
                      | ({"density": e["density"]} if "density" in e else {})
                      for e in result.evaluations],
            "met": bool(reached) and reached["train_seconds"] <= args.budget,
        }
        print(f"{variant}: {results[variant]['time_to_target_s']} s to target, "
              f"final {result.metrics}", flush=True)
    return {
        "benchmark": "train",
        "target": {"accuracy": TARGET_ACCURACY, "seconds": args.budget,
                   "ganet_density": TARGET_DENSITY},
        "all_met": all(r["met"] for r in results.values()),
        "settings": {"task": "sparse_evidence", "d_model": 64, "n_heads": 4, "n_layers": 2,
                     "batch_size": TrainConfig().batch_size, "steps": args.steps,
                     "eval_every": args.eval_every, "threads": args.threads, "seed": args.seed},
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "machine": platform.machine(), "cpus": torch.get_num_threads()},
        "variants": results,
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant, r in report["variants"].items():
        curve = r["curve"]
        ax.plot([c["train_seconds"] for c in curve], [c["accuracy"] for c in curve],
                marker=".", label=variant)
    ax.axhline(TARGET_ACCURACY, color="grey", linestyle="--", linewidth=1)
    ax.axvline(report["target"]["seconds"], color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("training time (s, evaluation excluded)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title("sparse_evidence: accuracy vs training time (2 threads)")
    ax.grid(alpha=0.3)
    ax.legend()
    atomic_write_png(fig, path, dpi=110, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", type=lambda s: tuple(s.split(",")), default=VARIANTS)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 steps")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_every = 40, 20
    report = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "train.json", json.dumps(report, indent=2) + "\n")
    plot(report, args.out / "train.png")
    print(f"wrote {args.out / 'train.json'}; all targets met: {report['all_met']}")


if __name__ == "__main__":
    main()
