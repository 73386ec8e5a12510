"""GA-Net on real text: held-out accuracy against gate density, for the same trained models.

`train --data` trains GA-Net towards density 0.3 and then moves its gate threshold so that the
validation density is 0.37 (`attndeploy.training.calibration`: one bias value moves). This script
trains GA-Net with those defaults (`--variation`, as `ganet_real_seeds.py` names them) for each
seed, then moves the same model's threshold to each density of `--densities` (on the validation
split, as training does) and to all gates open, and measures held-out accuracy and density at
each. The dense-gate run of the same seed (`ganet_real_seeds.py`'s `dense`: penalty off, no
target) and the naive Bayes baseline are the reference lines. It answers what the issue's
"within 1 point of the dense-gate run at density <= 0.40" costs on each set: how much held-out
accuracy each share of the words is worth to a model that was trained gated.

    .venv/bin/python benchmarks/real_text.py            # once: the data sets
    .venv/bin/python benchmarks/ganet_density_curve.py [--sets fortunes,debian] [--seeds 0,1,2]

Writes `ganet_density_curve.json` (per set: baseline; per seed: the dense run, the default
model's own point, and one point per density) and `ganet_density_curve.png`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import ganet_real_seeds  # noqa: E402  (the variations and their configs)
import train_real  # noqa: E402  (the same split and loader)

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.train import evaluate, fit_baseline, train  # noqa: E402
from attndeploy.training.calibration import calibrate_gate_threshold  # noqa: E402

DENSITIES = (0.2, 0.3, 0.37, 0.4, 0.5, 0.6, 0.8)
ALL_OPEN_SHIFT = 1e4  # added to the gate logits' bias: every gate opens
TARGET_DENSITY = train_real.TARGET_DENSITY
SLACK = train_real.DENSITY_ACCURACY_SLACK


def _point(model, data, *, density: float | None) -> dict:
    """Held-out accuracy and density of a copy of `model` with its threshold moved so that the
    validation density is `density` (None: every gate open)."""
    moved = copy.deepcopy(model)
    if density is None:
        with torch.no_grad():
            moved.gates.network.score.bias += ALL_OPEN_SHIFT
        calibration = {"gate_shift": ALL_OPEN_SHIFT}
    else:
        calibration = calibrate_gate_threshold(moved, data.val_set, density)
    metrics = evaluate(moved, data.eval_set)
    return {"asked": density, "accuracy": round(metrics["accuracy"], 4),
            "density": round(metrics["density"], 4),
            "gate_shift": round(calibration["gate_shift"], 4)}


def run_seed(data, variation: str, seed: int, densities: tuple[float, ...], progress: bool
             ) -> dict:
    cpu = time.process_time()
    config, training = ganet_real_seeds.configs(data, variation, seed)
    gated = train(config, data.train_set, data.eval_set, training, progress=progress,
                  val_set=data.val_set)
    dense_config, dense_training = ganet_real_seeds.configs(data, f"{variation}+dense", seed)
    dense = train(dense_config, data.train_set, data.eval_set, dense_training, progress=progress,
                  val_set=data.val_set)
    return {
        "seed": seed,
        "default": {"accuracy": round(gated.metrics["accuracy"], 4),
                    "density": round(gated.metrics["density"], 4)},
        "dense": {"accuracy": round(dense.metrics["accuracy"], 4),
                  "density": round(dense.metrics["density"], 4)},
        "curve": [_point(gated.model, data, density=d) for d in densities]
        + [_point(gated.model, data, density=None)],
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }


def summarise(seeds: list[dict]) -> dict:
    """Means over seeds: the dense run, and held-out accuracy and density per asked density."""
    mean = lambda values: round(sum(values) / len(values), 4)  # noqa: E731
    dense = mean([s["dense"]["accuracy"] for s in seeds])
    curve = []
    for i, point in enumerate(seeds[0]["curve"]):
        accuracy = mean([s["curve"][i]["accuracy"] for s in seeds])
        curve.append({"asked": point["asked"], "accuracy": accuracy,
                      "density": mean([s["curve"][i]["density"] for s in seeds]),
                      "vs_dense": round(accuracy - dense, 4)})
    within = [p for p in curve if p["vs_dense"] >= -SLACK]
    return {"dense_accuracy": dense,
            "default_accuracy": mean([s["default"]["accuracy"] for s in seeds]),
            "default_density": mean([s["default"]["density"] for s in seeds]),
            "curve": curve,
            "least_density_within_slack": min((p["density"] for p in within), default=None)}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(report["sets"])
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4.5), squeeze=False)
    for ax, name in zip(axes[0], sets, strict=True):
        s = report["sets"][name]
        for run in s["seeds"]:
            ax.plot([p["density"] for p in run["curve"]], [p["accuracy"] for p in run["curve"]],
                    color="tab:blue", alpha=0.25, linewidth=1, marker=".")
        mean = s["summary"]
        ax.plot([p["density"] for p in mean["curve"]], [p["accuracy"] for p in mean["curve"]],
                color="tab:blue", linewidth=2.2, marker="o",
                label=f"GA-Net, threshold moved (mean of {len(s['seeds'])} seeds)")
        ax.scatter([mean["default_density"]], [mean["default_accuracy"]], color="tab:green",
                   s=90, zorder=5, label=f"defaults: {mean['default_accuracy']:.3f}")
        ax.axhline(mean["dense_accuracy"], color="tab:orange", linewidth=1.5,
                   label=f"dense-gate run {mean['dense_accuracy']:.3f}")
        ax.axhspan(mean["dense_accuracy"] - SLACK, mean["dense_accuracy"], color="tab:orange",
                   alpha=0.12, label="within 1 point of dense")
        ax.axhline(s["baseline_accuracy"], color="black", linestyle="--", linewidth=1,
                   label=f"naive Bayes {s['baseline_accuracy']:.3f}")
        ax.axvline(TARGET_DENSITY, color="grey", linestyle=":", linewidth=1.2,
                   label="density 0.40")
        ax.set_xlim(0.1, 1.02)
        ax.set_xlabel("held-out gate density")
        ax.set_ylabel("held-out accuracy")
        ax.set_title(f"{name}: GA-Net accuracy against density")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    atomic_write_png(fig, path, dpi=110)


def main() -> None:
    train_real._passive_openmp()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="fortunes,debian")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--variation", default="default",
                        help="a ganet_real_seeds.py variation (joined with '+')")
    parser.add_argument("--densities", default=",".join(str(d) for d in DENSITIES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-bar", action="store_true", help="no per-run progress bar")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--data-dir", type=Path,
                        default=ROOT / "benchmarks" / "results" / "real_text")
    args = parser.parse_args()
    if not (args.data_dir / "manifest.json").is_file():
        raise SystemExit(f"{args.data_dir}/manifest.json not found: run benchmarks/real_text.py")
    ganet_real_seeds.combined(args.variation)  # an unknown variation fails before training
    densities = tuple(float(d) for d in args.densities.split(","))
    torch.set_num_threads(args.threads)
    split = json.loads((args.data_dir / "manifest.json").read_text())["split"]
    report = {"benchmark": "ganet_density_curve", "variation": args.variation,
              "densities": densities, "threads": args.threads,
              "environment": {"torch": torch.__version__, "python": platform.python_version(),
                              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                              "load_average_before": os.getloadavg()},
              "sets": {}}
    for name in args.sets.split(","):
        data = train_real._load(args.data_dir, name, split)
        seeds = []
        for seed in (int(s) for s in args.seeds.split(",")):
            seeds.append(run_seed(data, args.variation, seed, densities, not args.no_bar))
            print(json.dumps({"set": name, **seeds[-1]}), flush=True)
        report["sets"][name] = {"baseline_accuracy": fit_baseline(data)["baseline_accuracy"],
                                "seeds": seeds, "summary": summarise(seeds)}
        summary = report["sets"][name]["summary"]
        print(f"{name}: dense {summary['dense_accuracy']:.4f}; "
              + ", ".join(f"{p['density']:.2f} -> {p['accuracy']:.4f}" for p in summary["curve"]),
              flush=True)
    report["environment"]["load_average_after"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "ganet_density_curve.json", json.dumps(report, indent=2) + "\n")
    plot(report, args.out / "ganet_density_curve.png")
    print(f"wrote {args.out / 'ganet_density_curve.json'} and ganet_density_curve.png")


if __name__ == "__main__":
    main()
