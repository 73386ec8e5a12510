"""What the quickstart's numbers say against its own targets, in plain sentences for the report:
whether each variant trained its stated steps (or what stopped it), where GA-Net's gate density
landed against its target (a ceiling: the share of tokens a layer may attend to), and how the
model stands against the bag-of-words baseline."""

from __future__ import annotations

from typing import Any

# the keys of a checkpoint's training summary the notes read
SUMMARY_KEYS = ("steps_done", "horizon_steps", "stopped_by", "seconds")


def training_summary(checkpoint: Any) -> dict[str, Any]:
    """The part of a checkpoint's training summary the notes read (empty if it has none)."""
    training = checkpoint.metadata.get("training") or {}
    summary = {key: training[key] for key in SUMMARY_KEYS if key in training}
    max_seconds = (training.get("config") or {}).get("max_seconds")
    if max_seconds is not None:
        summary["max_seconds"] = max_seconds
    return summary


def steps_note(training: dict[str, Any]) -> str | None:
    """Whether the stated steps were trained, or what stopped training first."""
    if "steps_done" not in training:
        return None
    done, planned = training["steps_done"], training.get("horizon_steps", training["steps_done"])
    if training.get("stopped_by") == "time":
        return (f"trained {done} of its {planned} steps: the {training['max_seconds']:g} s cap "
                "(--max-train-seconds) stopped it; on a busy machine raise the cap, or give 0 "
                "for none")
    return f"trained its {done} of {planned} steps (stopped by {training['stopped_by']})"


def density_note(metrics: dict[str, Any]) -> str | None:
    """GA-Net's held-out gate density against its target, a ceiling."""
    if "density" not in metrics or metrics.get("density_target") is None:
        return None
    density, target = metrics["density"], metrics["density_target"]
    if density <= target:
        return (f"gate density {density:.3f}, within its target of at most {target:g}: the "
                f"layers attend to {density:.0%} of the tokens")
    return (f"gate density {density:.3f} misses its target of at most {target:g} by "
            f"{density - target:.3f}")


def baseline_note(metrics: dict[str, Any]) -> str | None:
    """The model against the bag-of-words baseline, a tie at perfect accuracy explained."""
    if "baseline_accuracy" not in metrics:
        return None
    model, base = metrics["accuracy"], metrics["baseline_accuracy"]
    if model == base == 1.0:
        return ("held-out accuracy 1.0000, as the bag-of-words baseline's: the built-in task "
                "is solved by both, so it shows the pipeline, not a gain from attention (the "
                "real-text benchmarks in benchmarks/README.md measure that)")
    if model > base:
        return f"held-out accuracy {model:.4f} beats the bag-of-words baseline's {base:.4f}"
    return (f"held-out accuracy {model:.4f} does not beat the bag-of-words baseline's "
            f"{base:.4f}: the built-in task is one a bag of words nearly solves, so a miss of "
            f"{base - model:.4f} says little about attention (the real-text benchmarks in "
            "benchmarks/README.md measure that)")


def target_notes(metrics: dict[str, Any], training: dict[str, Any]) -> list[str]:
    """Every note that applies to one variant, in order: steps, density, baseline."""
    notes = (steps_note(training), density_note(metrics), baseline_note(metrics))
    return [note for note in notes if note is not None]
