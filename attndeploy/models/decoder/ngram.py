"""An interpolated Kneser-Ney trigram model: the baseline a trained decoder's perplexity is
read beside (issue #49). Pure Python over token ids; lower perplexity is better.

Interpolated KN (Chen & Goodman 1998) with one discount D = 0.75 at each order:

    P(w | u v) = max(c(u v w) - D, 0) / c(u v ·) + D · N1+(u v ·) / c(u v ·) · P(w | v)
    P(w | v)   = max(N1+(· v w) - D, 0) / N1+(· v ·) + D · N1+(v ·) / N1+(· v ·) · P(w)
    P(w)       = N1+(· w) / N1+(· ·)   (continuation counts), mixed with 1/V so no id has 0

A context never seen falls back to the lower order whole.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

DISCOUNT = 0.75


class KneserNeyTrigram:
    """Fit on token-id sequences (each starting with `<bos>`), then `perplexity(sequences)`."""

    def __init__(self, vocab_size: int, discount: float = DISCOUNT) -> None:
        self.vocab_size = vocab_size
        self.d = discount
        self.tri: Counter = Counter()
        self.tri_context: Counter = Counter()  # c(u v ·)
        self.tri_types: Counter = Counter()  # N1+(u v ·)
        self.cont_bi: Counter = Counter()  # N1+(· v w)
        self.cont_bi_context: Counter = Counter()  # N1+(· v ·)
        self.bi_types: Counter = Counter()  # N1+(v ·) over distinct (· v w)-continued pairs
        self.cont_uni: Counter = Counter()  # N1+(· w)
        self.cont_uni_total = 0

    def fit(self, sequences: Iterable[Sequence[int]]) -> KneserNeyTrigram:
        trigrams: set = set()
        for seq in sequences:
            seq = [int(t) for t in seq]
            for i in range(1, len(seq)):  # a text's second token has only a bigram context
                gram = (seq[i - 2] if i >= 2 else None, seq[i - 1], seq[i])
                trigrams.add(gram)
                self.tri[gram] += 1
        bigrams: set = set()
        for (u, v, w), count in self.tri.items():
            self.tri_context[(u, v)] += count
            self.tri_types[(u, v)] += 1
            bigrams.add((v, w))
        for (_u, v, w) in trigrams:
            self.cont_bi[(v, w)] += 1
            self.cont_bi_context[v] += 1
        for (v, w) in bigrams:
            self.bi_types[v] += 1
            self.cont_uni[w] += 1
        self.cont_uni_total = sum(self.cont_uni.values())
        return self

    def _unigram(self, w: int) -> float:
        known = self.cont_uni[w] / self.cont_uni_total if self.cont_uni_total else 0.0
        return 0.9 * known + 0.1 / self.vocab_size

    def _bigram(self, v: int, w: int) -> float:
        total = self.cont_bi_context[v]
        if not total:
            return self._unigram(w)
        rest = self.d * self.bi_types[v] / total
        return max(self.cont_bi[(v, w)] - self.d, 0) / total + rest * self._unigram(w)

    def prob(self, u: int | None, v: int, w: int) -> float:
        total = self.tri_context[(u, v)]
        if not total:
            return self._bigram(v, w)
        rest = self.d * self.tri_types[(u, v)] / total
        return max(self.tri[(u, v, w)] - self.d, 0) / total + rest * self._bigram(v, w)

    def perplexity(self, sequences: Iterable[Sequence[int]]) -> float:
        """exp of the mean negative log-likelihood of every token after the first."""
        nll, count = 0.0, 0
        for seq in sequences:
            seq = [int(t) for t in seq]
            for i in range(1, len(seq)):
                u = seq[i - 2] if i >= 2 else None
                nll -= math.log(self.prob(u, seq[i - 1], seq[i]))
                count += 1
        return math.exp(nll / count) if count else float("nan")
