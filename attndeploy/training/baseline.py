"""The baseline every run is compared with, and what the comparison says.

The text-classification family's baseline, bag-of-words naive Bayes, lives in
`attndeploy.data.baseline` (below the model layer, where a family's training part reads it) and is
re-exported here; the comparison reads the family's primary metric (`PRIMARY_METRIC`,
`GREATER_IS_BETTER` of its training part), accuracy for the built-in families.
"""

from __future__ import annotations

from typing import Any

from attndeploy.data.baseline import (  # noqa: F401  (re-exported: the public names)
    ALPHAS,
    FOLDS,
    NaiveBayes,
    baseline_metrics,
    choose_alpha,
    fit_baseline_model,
)


def compare_with_baseline(metrics: dict[str, Any], *, primary: str = "accuracy",
                          greater_is_better: bool = True) -> dict[str, Any]:
    """`baseline_margin` (how far the model is better than the baseline on the primary metric:
    model − baseline, or baseline − model where lower is better) and `beats_baseline`, when
    there is one (`baseline_<primary>` in `metrics`)."""
    if f"baseline_{primary}" not in metrics:
        return {}
    margin = metrics[primary] - metrics[f"baseline_{primary}"]
    if not greater_is_better:
        margin = -margin
    return {"baseline_margin": margin, "beats_baseline": margin > 0}


def baseline_verdict(metrics: dict[str, Any]) -> str | None:
    """One plain sentence on the model against the baseline, or None without a baseline."""
    if "baseline_accuracy" not in metrics:
        return None
    model, base = metrics["accuracy"], metrics["baseline_accuracy"]
    if model > base:
        return (f"the model beats the bag-of-words baseline: held-out accuracy {model:.4f} "
                f"vs {base:.4f}")
    if model == base == 1.0:
        return ("the model and the bag-of-words baseline both get every held-out example right "
                "(accuracy 1.0000): this data does not tell them apart")
    if model == base:
        return (f"the model does not beat the bag-of-words baseline, it only matches it: "
                f"held-out accuracy {model:.4f} each")
    return (f"WARNING: the model does not beat the bag-of-words baseline (naive Bayes on word "
            f"counts): held-out accuracy {model:.4f} vs {base:.4f}; more data, other "
            f"settings, or the baseline itself may serve better")


def probe_verdict(metrics: dict[str, Any]) -> str | None:
    """One plain sentence on a pretrained fine-tune against its frozen encoder's linear probe
    (`probe_accuracy`), or None without one."""
    if "probe_accuracy" not in metrics:
        return None
    model, probe = metrics["accuracy"], metrics["probe_accuracy"]
    if model > probe:
        return (f"the fine-tune beats the frozen encoder's linear probe (mean pooling, logistic "
                f"regression): held-out accuracy {model:.4f} vs {probe:.4f}")
    return (f"WARNING: the fine-tune does not beat the frozen encoder's linear probe (mean "
            f"pooling, logistic regression): held-out accuracy {model:.4f} vs {probe:.4f}; "
            f"more data or more epochs may serve better")
