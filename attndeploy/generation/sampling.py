"""Choosing the next token from one step's scores (numpy only): greedy, or sampling with a
temperature, top-k and top-p (nucleus) and a seed.

`Sampling()` is greedy (argmax; ties take the lowest id). With `temperature` > 0 the scores are
divided by it; `top_k` keeps the k largest; `top_p` keeps the smallest set of the most likely
tokens whose probabilities reach p (at least one); then a token is drawn from what is left with
`numpy.random.default_rng(seed)`, so the same seed gives the same text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndeploy.errors import ConfigError


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(f"top-k must be at least 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def asked(cls, temperature: float | None = None, top_k: int | None = None,
              top_p: float | None = None, seed: int | None = None) -> Sampling:
        """Greedy unless sampling is asked for: any of top-k, top-p or a seed without a
        temperature samples at temperature 1."""
        sampling = temperature is not None and temperature > 0 or any(
            v is not None for v in (top_k, top_p, seed))
        if temperature == 0 and any(v is not None for v in (top_k, top_p)):
            raise ConfigError("temperature 0 is greedy: top-k and top-p need a temperature > 0")
        if not sampling:
            return cls()
        return cls(temperature=1.0 if temperature is None else temperature, top_k=top_k,
                   top_p=top_p, seed=seed)


def filtered_probabilities(scores: np.ndarray, sampling: Sampling) -> np.ndarray:
    """float64 [B, V]: the distribution a token is drawn from (0 outside top-k / top-p)."""
    z = scores.astype(np.float64) / sampling.temperature  # [B, V]
    if sampling.top_k is not None and sampling.top_k < z.shape[-1]:
        kth = np.sort(z, axis=-1)[:, -sampling.top_k][:, None]  # [B, 1]
        z = np.where(z < kth, -np.inf, z)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)  # [B, V]
    if sampling.top_p is not None and sampling.top_p < 1.0:
        order = np.argsort(-p, axis=-1, kind="stable")  # [B, V]
        sorted_p = np.take_along_axis(p, order, axis=-1)
        before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass of the more likely ones
        keep_sorted = before < sampling.top_p  # the first always kept
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


class TokenChooser:
    """`choose(scores [B, V]) -> ids [B]` under one `Sampling`, with its own generator."""

    def __init__(self, sampling: Sampling) -> None:
        self.sampling = sampling
        self.rng = np.random.default_rng(sampling.seed)

    def choose(self, scores: np.ndarray) -> np.ndarray:
        if self.sampling.greedy:
            return np.argmax(scores, axis=-1).astype(np.int64)  # [B]
        p = filtered_probabilities(scores, self.sampling)  # [B, V]
        u = self.rng.random((p.shape[0], 1))  # [B, 1]
        ids = (np.cumsum(p, axis=-1) < u).sum(axis=-1)  # [B]: inverse CDF
        return np.minimum(ids, p.shape[-1] - 1).astype(np.int64)
