"""The linear probe's logistic regression (`attndeploy.training.probe`)."""

from __future__ import annotations

import pytest
import torch

from attndeploy.errors import DataError
from attndeploy.training.probe import LogisticProbe, choose_l2, probe_metrics


def _blobs(n: int, *, seed: int, noise: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """Three classes around three far-apart centres in 6 dimensions, plus a constant column."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3  # [N]
    centres = torch.eye(3, 6) * 4  # [3, 6]
    features = centres[labels] + noise * torch.randn(n, 6, generator=generator)  # [N, 6]
    return torch.cat([features, torch.ones(n, 1)], dim=1), labels  # [N, 7]


def test_the_probe_separates_what_a_linear_map_separates():
    features, labels = _blobs(90, seed=0)
    held_features, held_labels = _blobs(60, seed=1)
    probe = LogisticProbe.fit(features, labels, 3, l2=1e-3)
    assert probe.accuracy(held_features, held_labels) == 1.0
    assert torch.isfinite(probe.weight).all()  # the constant column is not divided by 0


def test_strong_regularisation_underfits_and_cross_validation_avoids_it():
    features, labels = _blobs(60, seed=2, noise=1.5)
    squeezed = LogisticProbe.fit(features, labels, 3, l2=100.0)
    fitted = LogisticProbe.fit(features, labels, 3, l2=1e-3)
    assert squeezed.weight.abs().max() < fitted.weight.abs().max() / 10
    best, scores = choose_l2(features, labels, 3, strengths=(1e-3, 1e4))
    assert best == 1e-3 and scores[1e-3] > scores[1e4]


def test_ties_in_cross_validation_go_to_the_stronger_regularisation():
    features, labels = _blobs(60, seed=3, noise=0.01)  # every strength scores 1.0
    best, scores = choose_l2(features, labels, 3, strengths=(1e-4, 1e-2))
    assert scores[1e-4] == scores[1e-2] == 1.0 and best == 1e-2


def test_probe_metrics_fit_on_one_set_and_score_the_other():
    features, labels = _blobs(90, seed=4)
    held_features, held_labels = _blobs(30, seed=5)
    metrics = probe_metrics(features, labels, held_features, (held_labels + 1) % 3, 3)
    assert metrics["probe_accuracy"] == 0.0  # every held-out label shifted: scored there
    assert metrics["probe_l2"] > 0


def test_a_probe_without_examples_is_refused():
    with pytest.raises(DataError, match="at least one"):
        LogisticProbe.fit(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), 2, l2=0.1)


def test_the_probe_verdict_says_whether_the_fine_tune_beats_the_frozen_encoder():
    from attndeploy.training.baseline import probe_verdict

    assert probe_verdict({"accuracy": 0.8}) is None  # no probe: a model without pretraining
    assert probe_verdict({"accuracy": 0.8, "probe_accuracy": 0.7}).startswith(
        "the fine-tune beats the frozen encoder's linear probe")
    losing = probe_verdict({"accuracy": 0.7, "probe_accuracy": 0.7})  # a tie does not beat it
    assert losing.startswith("WARNING: the fine-tune does not beat")
    assert "0.7000 vs 0.7000" in losing
