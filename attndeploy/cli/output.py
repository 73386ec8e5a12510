"""Printing helpers: rich for people, JSON for machines, and the one error handler."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console()
error_console = Console(stderr=True, soft_wrap=True)  # one line per message, never wrapped


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def format_mapping(data: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """`data` as lines a person reads: `key: value`, a nested mapping as `key:` and its own
    lines indented once more. None is "none", a bool "true"/"false", a float its shortest
    form, a list its items comma-separated (an empty one "none"); the JSON output keeps the
    values as they are."""
    lines = []
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            lines.append(f"{indent}{key}:")
            lines.extend(format_mapping(value, indent + "  "))
        else:
            lines.append(f"{indent}{key}: {format_value(value)}")
    return lines


def named_lines(name: str, data: Any, indent: str = "") -> list[str]:
    """`name: value`, or for a non-empty mapping `name:` and its `format_mapping` lines under it."""
    if not isinstance(data, Mapping) or not data:
        return [f"{indent}{name}: {format_value(data)}"]
    return [f"{indent}{name}:", *format_mapping(data, indent + "  ")]


def format_value(value: Any) -> str:
    """One value of `format_mapping`."""
    if value is None or (isinstance(value, (list, tuple, Mapping)) and not value):
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(item) for item in value)
    return str(value)


def print_error(stage: str, message: str) -> None:
    error_console.print(f"[bold red]error[/] ({stage}): {escape(message)}", highlight=False)


def print_warning(message: str) -> None:
    error_console.print(f"[yellow]warning[/]: {escape(message)}", highlight=False)


# --------------------------------------------------------------------------- train

TRAIN_SHOWN = ("accuracy", "loss", "density", "rescue_rate", "baseline_accuracy")


def shown_metrics(metrics: dict[str, Any]) -> list[str]:
    """The held-out metrics `train` prints: `TRAIN_SHOWN`'s, then any other family's metric that
    has a baseline beside it (`rmse` and `baseline_rmse` for a regressor), in that order."""
    keys = [key for key in TRAIN_SHOWN if key in metrics]
    for key in metrics:
        primary = key.removeprefix("baseline_")
        if key.startswith("baseline_") and primary in metrics and key not in keys:
            keys += [k for k in (primary, key) if k not in keys]
    return [key for key in keys if isinstance(metrics[key], (int, float))]


def summary_lines(out: Path, metrics: dict[str, Any], training: dict[str, Any]) -> str:
    """What `train` prints: the held-out numbers, where the best model was, the baseline."""
    from attndeploy.training.baseline import baseline_verdict

    shown = ", ".join(f"{key} {metrics[key]:.4f}" for key in shown_metrics(metrics))
    selected_on = training.get("selected_on")
    kept = (f"  best at epoch {training['best_epoch']:g} (step {training['best_step']}) of "
            f"{training['epochs_done']:g}, chosen on the {selected_on} set"
            if selected_on else  # a fixed number of epochs: no selection, the last model kept
            f"  the model after {training['epochs_done']:g} epochs (step {training['best_step']}),"
            " no selection")
    lines = [f"saved [bold]{out}[/] ({training['seconds']:.1f} s): held-out {shown}",
             f"{kept}; stopped by {training['stopped_by']}"]
    refit = training.get("refit")
    if refit is not None:
        lines.append(f"  {refit['skipped']}: no refit" if "skipped" in refit else
                     f"  then refit on training + validation ({refit['examples']} examples) "
                     f"for {refit['epochs']} epochs; this is the model saved")
    teacher = training.get("teacher")
    if teacher is not None:
        lines.append(f"  learnt from its dense-gate run too (held-out accuracy "
                     f"{teacher['accuracy']:.4f}, {teacher['seconds']:.1f} s, weight "
                     f"{teacher['weight']:g})")
    if "density_target" in metrics:
        calibrated = training.get("gate_calibration")
        moved = "" if calibrated is None else (
            f", threshold moved by {calibrated['gate_shift']:+.2f} from "
            f"{calibrated['density_before']:.3f} on the "
            f"{calibrated.get('on', training.get('selected_on'))} set")
        within = ("within" if metrics["density"] <= metrics["density_target"]
                  else "above")
        lines.append(f"  gate density {metrics['density']:.3f} ({within} its target of at most "
                     f"{metrics['density_target']:g}{moved})")
    verdict = baseline_verdict(metrics)
    if verdict:
        solved = metrics.get("accuracy") == metrics.get("baseline_accuracy") == 1.0
        style = "green" if metrics.get("beats_baseline") or solved else "bold yellow"
        lines.append(f"  [{style}]{verdict}[/]")
    return "\n".join(lines)
