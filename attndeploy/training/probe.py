"""The linear probe: multinomial logistic regression on fixed features (torch, full batch).

A pretrained encoder's first comparison is not a bag of words but the encoder itself, frozen:
mean-pooled features of every text and a linear classifier on them (`integrations.hf_probe`
reads the features). A fine-tune that cannot beat this probe has not used its training.

Model: p(c | x) = softmax(W·z + b), z the features standardised with the fitting examples'
mean and spread, fitted by L-BFGS on the mean cross-entropy + `l2`·‖W‖². The strength `l2` is
chosen by k-fold cross-validation on the fitting examples alone (ties: the stronger), from
`L2_STRENGTHS`, as naive Bayes chooses its smoothing (`data.baseline`): a fixed strength
over- or under-fits depending on the set's size, which would make the probe easier to beat than
it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attndeploy.errors import DataError

L2_STRENGTHS = (1e-4, 1e-3, 1e-2, 1e-1)
FOLDS = 5
MAX_ITERATIONS = 100


@dataclass(frozen=True)
class LogisticProbe:
    """A fitted probe (`LogisticProbe.fit`)."""

    mean: torch.Tensor  # [H] the fitting features' mean
    scale: torch.Tensor  # [H] their standard deviation (1 where constant)
    weight: torch.Tensor  # [C, H]
    bias: torch.Tensor  # [C]
    l2: float

    @classmethod
    def fit(cls, features: torch.Tensor, labels: torch.Tensor, num_labels: int, *,
            l2: float) -> LogisticProbe:
        """Fit on `features` [N, H] (float) and `labels` [N] (class indices)."""
        if not len(features):
            raise DataError("the linear probe needs at least one fitting example")
        features = features.double()
        mean = features.mean(0)  # [H]
        scale = features.std(0, unbiased=False)  # [H]
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        z = (features - mean) / scale  # [N, H]
        weight = torch.zeros(num_labels, z.shape[1], dtype=torch.float64, requires_grad=True)
        bias = torch.zeros(num_labels, dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.LBFGS([weight, bias], max_iter=MAX_ITERATIONS,
                                      line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = (torch.nn.functional.cross_entropy(z @ weight.T + bias, labels)
                    + l2 * weight.pow(2).sum())
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
        return cls(mean, scale, weight.detach(), bias.detach(), l2)

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """Class indices [N] of `features` [N, H]."""
        z = (features.double() - self.mean) / self.scale  # [N, H]
        return (z @ self.weight.T + self.bias).argmax(-1)

    def accuracy(self, features: torch.Tensor, labels: torch.Tensor) -> float:
        if not len(labels):
            return float("nan")
        return float((self.predict(features) == labels).double().mean())


def choose_l2(features: torch.Tensor, labels: torch.Tensor, num_labels: int, *,
              strengths: Sequence[float] = L2_STRENGTHS, folds: int = FOLDS, seed: int = 0
              ) -> tuple[float, dict[float, float]]:
    """The strength of `strengths` with the best k-fold accuracy on (features [N, H], labels
    [N]), and every strength's score; ties go to the stronger."""
    n = len(labels)
    folds = max(2, min(folds, n))
    fold_of = torch.randperm(n, generator=torch.Generator().manual_seed(seed)) % folds  # [N]
    scores: dict[float, float] = {}
    for l2 in strengths:
        correct = 0
        for k in range(folds):
            fit_rows, test_rows = fold_of != k, fold_of == k
            if not bool(fit_rows.any()) or not bool(test_rows.any()):
                continue
            probe = LogisticProbe.fit(features[fit_rows], labels[fit_rows], num_labels, l2=l2)
            correct += int((probe.predict(features[test_rows]) == labels[test_rows]).sum())
        scores[l2] = correct / n
    best = max(scores, key=lambda s: (scores[s], s))
    return best, scores


def probe_metrics(fit_features: torch.Tensor, fit_labels: torch.Tensor,
                  eval_features: torch.Tensor, eval_labels: torch.Tensor, num_labels: int, *,
                  seed: int = 0) -> dict[str, float]:
    """Fit the probe on the fitting examples (its strength by cross-validation there) and score
    it on the held-out ones: {"probe_accuracy": ..., "probe_l2": ...}."""
    l2, _ = choose_l2(fit_features, fit_labels, num_labels, seed=seed)
    probe = LogisticProbe.fit(fit_features, fit_labels, num_labels, l2=l2)
    return {"probe_accuracy": probe.accuracy(eval_features, eval_labels), "probe_l2": l2}
