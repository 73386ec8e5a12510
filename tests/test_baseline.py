"""The bag-of-words baseline: naive Bayes arithmetic, cross-validated smoothing, the verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndeploy.errors import DataError
from attndeploy.training.baseline import (
    NaiveBayes,
    baseline_metrics,
    baseline_verdict,
    choose_alpha,
    compare_with_baseline,
)

DOCS = [["good", "film"], ["good", "good", "plot"], ["bad", "film"], ["bad", "plot", "bad"]]
LABELS = [1, 1, 0, 0]


def test_naive_bayes_scores_match_the_formula_by_hand():
    model = NaiveBayes.fit(DOCS, LABELS, 2, alpha=1.0)
    # Vocabulary: good, film, plot, bad (V = 4). Class 1 counts: good 3, film 1, plot 1, bad 0.
    theta_1 = {"good": 4 / 9, "film": 2 / 9, "plot": 2 / 9, "bad": 1 / 9}
    theta_0 = {"good": 1 / 9, "film": 2 / 9, "plot": 2 / 9, "bad": 4 / 9}
    doc = ["good", "bad", "bad", "unseen"]  # an unseen word carries no evidence
    expected = [math.log(0.5) + sum(math.log(t[w]) for w in doc[:3]) for t in (theta_0, theta_1)]
    np.testing.assert_allclose(model.scores([doc])[0], expected)
    assert model.predict([["good"], ["bad"], ["unseen"]]).tolist()[:2] == [1, 0]


def test_naive_bayes_learns_the_prior_and_reads_only_known_words():
    model = NaiveBayes.fit([["a"], ["a"], ["b"]], [0, 0, 1], 3, alpha=0.5)
    np.testing.assert_allclose(np.exp(model.log_prior), [2 / 3, 1 / 3, 0.0], atol=1e-12)
    assert model.predict([["zzz"]]).tolist() == [0]  # nothing known: the prior decides


def test_naive_bayes_refuses_mismatched_inputs():
    with pytest.raises(DataError, match="one label per text"):
        NaiveBayes.fit(DOCS, LABELS[:3], 2)
    with pytest.raises(DataError, match="smoothing must be > 0"):
        NaiveBayes.fit(DOCS, LABELS, 2, alpha=0.0)


def test_smoothing_is_chosen_by_cross_validation_on_the_training_examples_alone():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(200)]
    docs, labels = [], []
    for n in range(200):  # one informative word per class, many rare noise words
        label = n % 2
        docs.append([f"cue{label}", *rng.choice(words, 3)])
        labels.append(label)
    alpha, scores = choose_alpha(docs, labels, 2, alphas=(0.1, 1.0), folds=4)
    assert set(scores) == {0.1, 1.0} and alpha == max(scores, key=lambda a: (scores[a], a))
    assert all(0.0 <= s <= 1.0 for s in scores.values())
    metrics = baseline_metrics(docs[:150], labels[:150], docs[150:], labels[150:], 2)
    assert metrics["baseline"] == "naive_bayes_bow"
    assert metrics["baseline_accuracy"] == 1.0 and metrics["baseline_alpha"] > 0


def test_the_verdict_says_plainly_when_the_model_does_not_beat_the_baseline():
    losing = {"accuracy": 0.61, "baseline_accuracy": 0.64}
    assert compare_with_baseline(losing) == {"baseline_margin": pytest.approx(-0.03),
                                             "beats_baseline": False}
    assert baseline_verdict(losing).startswith("WARNING: the model does not beat")
    assert "0.6100 vs 0.6400" in baseline_verdict(losing)
    winning = {"accuracy": 0.7, "baseline_accuracy": 0.64}
    assert compare_with_baseline(winning)["beats_baseline"] is True
    assert baseline_verdict(winning).startswith("the model beats")
    tie = {"accuracy": 0.9, "baseline_accuracy": 0.9}
    assert compare_with_baseline(tie)["beats_baseline"] is False
    assert baseline_verdict(tie).startswith("the model does not beat the bag-of-words baseline, "
                                            "it only matches it")
    solved = {"accuracy": 1.0, "baseline_accuracy": 1.0}  # a task both get right throughout
    assert compare_with_baseline(solved)["beats_baseline"] is False
    assert baseline_verdict(solved).startswith("the model and the bag-of-words baseline both "
                                               "get every held-out example right")
    assert compare_with_baseline({"accuracy": 0.5}) == {} and baseline_verdict({}) is None
