"""The baseline beside every image model: multinomial logistic regression on the normalised
pixels, fitted to convergence by L-BFGS on the whole training set (a convex problem: the
result does not depend on a seed or a step budget)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

L2 = 1e-4  # weight decay on the weights (not the bias), per example
MAX_ITERATIONS = 200


def fit_logistic(x: torch.Tensor, y: torch.Tensor, num_labels: int, *, l2: float = L2,
                 max_iterations: int = MAX_ITERATIONS) -> torch.nn.Linear:
    """x float [N, C, H, W] (normalised), y long [N] -> a Linear(C*H*W, num_labels)."""
    features = x.reshape(len(x), -1)  # [N, CHW]
    model = torch.nn.Linear(features.shape[1], num_labels)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=max_iterations,
                                  history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(features), y) + l2 * model.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return model


@torch.no_grad()
def logistic_accuracy(model: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor) -> float:
    """The share of x [N, C, H, W] the baseline labels y."""
    predicted = model(x.reshape(len(x), -1)).argmax(-1)  # [N]
    return float((predicted == y).float().mean())
