"""A bag-of-words baseline: multinomial naive Bayes over word counts, numpy only.

Every text-classification run fits it (its family's training part, `fit_baseline`) on the same
training examples as the model and scores it on the same held-out examples, so that `metrics`
can say whether the model beats the trivial answer.

Model: log P(c | doc) ∝ log π_c + Σ_w n_w log θ_cw, with θ_cw = (N_cw + α) / (N_c + α·V) over
the V words of the training texts (a word never seen in training carries no evidence). The
smoothing α is chosen by k-fold cross-validation on the training examples alone (ties: the larger
α), from `ALPHAS`: α = 1 (Laplace), the textbook default, over-smooths large vocabularies and
loses several points on real text, so a fixed α would make the baseline easier to beat than it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attndeploy.errors import DataError

ALPHAS = (0.01, 0.03, 0.1, 0.3, 1.0)
FOLDS = 5

Docs = Sequence[Sequence[str]]  # one list of tokens per text


@dataclass(frozen=True)
class NaiveBayes:
    """A fitted multinomial naive Bayes classifier (`NaiveBayes.fit`)."""

    vocabulary: dict[str, int]  # word -> column; column V (the last) is every unseen word
    log_prior: np.ndarray  # [C]
    log_likelihood: np.ndarray  # [V + 1, C]; the unseen-word row is 0
    alpha: float

    @classmethod
    def fit(cls, docs: Docs, labels: Sequence[int], num_labels: int, *, alpha: float = 1.0
            ) -> NaiveBayes:
        if not alpha > 0:
            raise DataError(f"naive Bayes smoothing must be > 0, got {alpha}")
        labels = np.asarray(labels, dtype=np.int64)  # [N]
        if len(docs) != len(labels) or not len(docs):
            raise DataError(f"naive Bayes needs one label per text; got {len(docs)} texts "
                            f"and {len(labels)} labels")
        vocabulary: dict[str, int] = {}
        for doc in docs:
            for word in doc:
                vocabulary.setdefault(word, len(vocabulary))
        words, owners = _flatten(docs, vocabulary)  # [n_tokens] each
        n_words = len(vocabulary)
        counts = np.bincount(labels[owners] * n_words + words, minlength=num_labels * n_words)
        counts = counts.reshape(num_labels, n_words).astype(np.float64) + alpha  # [C, V]
        log_likelihood = np.log(counts) - np.log(counts.sum(1, keepdims=True))  # [C, V]
        log_likelihood = np.concatenate([log_likelihood.T, np.zeros((1, num_labels))])  # [V+1, C]
        prior = np.bincount(labels, minlength=num_labels).astype(np.float64)
        log_prior = np.log(np.maximum(prior, 1e-12) / prior.sum())
        return cls(vocabulary, log_prior, log_likelihood, alpha)

    def scores(self, docs: Docs) -> np.ndarray:
        """Unnormalised log posteriors [N, C]."""
        words, owners = _flatten(docs, self.vocabulary)
        per_doc = np.zeros((len(docs), self.log_prior.shape[0]))  # [N, C]
        np.add.at(per_doc, owners, self.log_likelihood[words])
        return per_doc + self.log_prior

    def predict(self, docs: Docs) -> np.ndarray:
        return self.scores(docs).argmax(-1)  # [N]

    def accuracy(self, docs: Docs, labels: Sequence[int]) -> float:
        return float((self.predict(docs) == np.asarray(labels)).mean())


def _flatten(docs: Docs, vocabulary: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(word column, document index) per token; unseen words get the last column."""
    unseen = len(vocabulary)
    words = [vocabulary.get(word, unseen) for doc in docs for word in doc]
    owners = np.repeat(np.arange(len(docs)), [len(doc) for doc in docs])
    return np.asarray(words, dtype=np.int64), owners


def choose_alpha(docs: Docs, labels: Sequence[int], num_labels: int, *,
                 alphas: Sequence[float] = ALPHAS, folds: int = FOLDS, seed: int = 0
                 ) -> tuple[float, dict[float, float]]:
    """The α of `alphas` with the best k-fold accuracy on (docs, labels), and every α's score."""
    labels = np.asarray(labels)
    n = len(docs)
    folds = max(2, min(folds, n))
    fold_of = np.random.default_rng(seed).permutation(n) % folds  # [N]
    scores: dict[float, float] = {}
    for alpha in alphas:
        correct = 0
        for k in range(folds):
            fit_rows = np.flatnonzero(fold_of != k)
            test_rows = np.flatnonzero(fold_of == k)
            model = NaiveBayes.fit([docs[i] for i in fit_rows], labels[fit_rows], num_labels,
                                   alpha=alpha)
            correct += int((model.predict([docs[i] for i in test_rows]) == labels[test_rows]).sum())
        scores[alpha] = correct / n
    best = max(scores, key=lambda a: (scores[a], a))
    return best, scores


def fit_baseline_model(train_docs: Docs, train_labels: Sequence[int], num_labels: int, *,
                       seed: int = 0) -> NaiveBayes:
    """The baseline fitted on the training examples, its α chosen by cross-validation there."""
    alpha, _ = choose_alpha(train_docs, train_labels, num_labels, seed=seed)
    return NaiveBayes.fit(train_docs, train_labels, num_labels, alpha=alpha)


def baseline_metrics(train_docs: Docs, train_labels: Sequence[int], eval_docs: Docs,
                     eval_labels: Sequence[int], num_labels: int, *, seed: int = 0
                     ) -> dict[str, Any]:
    """Fit the baseline on the training examples (α by cross-validation there) and score it on
    the held-out ones: {"baseline": ..., "baseline_accuracy": ..., "baseline_alpha": ...}."""
    model = fit_baseline_model(train_docs, train_labels, num_labels, seed=seed)
    return {
        "baseline": "naive_bayes_bow",
        "baseline_accuracy": model.accuracy(eval_docs, eval_labels),
        "baseline_alpha": model.alpha,
    }
