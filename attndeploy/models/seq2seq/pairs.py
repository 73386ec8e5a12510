"""Sentence pairs and their fixed held-out split (issue #51), torch-free.

A pair is (source, target). The held-out split is fixed: it does not depend on a seed or on the
file's order, so the builder (`benchmarks/translation_data.py`), `attndeploy train` and any
later measurement hold out the same pairs. Near-duplicates stay on one side: every pair is
joined (union-find) to the pairs that share its source's or its target's *key* (lower case,
letters and digits only, every number a 0: "Open file…" and "open file" and "Open 2 files" /
"Open 3 files" share one), and a whole group goes to the held-out side when the SHA-256 of its
smallest key falls under `fraction`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

Pair = tuple[str, str]
_NOT_WORD = re.compile(r"[^\w]+")
_DIGIT = re.compile(r"\d+")


def near_duplicate_key(text: str) -> str:
    """The key two near-duplicate texts share (the module docstring)."""
    return _DIGIT.sub("0", _NOT_WORD.sub(" ", text.casefold())).strip()


def _hash_share(key: str) -> float:
    """A fixed number in [0, 1) for `key`."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0 ** 64


def near_duplicate_groups(pairs: Sequence[Pair]) -> list[int]:
    """The group of each pair: pairs that share a source or a target key are one group
    (transitively)."""
    parent = list(range(len(pairs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[str, int] = {}
    for index, (source, target) in enumerate(pairs):
        for key in ("s:" + near_duplicate_key(source), "t:" + near_duplicate_key(target)):
            other = first_seen.setdefault(key, index)
            parent[find(index)] = find(other)
    return [find(i) for i in range(len(pairs))]


def held_out_mask(pairs: Sequence[Pair], fraction: float) -> list[bool]:
    """True for the pairs on the held-out side (about `fraction` of the groups)."""
    groups = near_duplicate_groups(pairs)
    smallest: dict[int, str] = {}
    for (source, _), group in zip(pairs, groups, strict=True):
        key = near_duplicate_key(source)
        if group not in smallest or key < smallest[group]:
            smallest[group] = key
    held = {group: _hash_share(key) < fraction for group, key in smallest.items()}
    return [held[group] for group in groups]


def split_pairs(pairs: Sequence[Pair], fraction: float) -> tuple[list[Pair], list[Pair]]:
    """(training pairs, held-out pairs), in file order (the module docstring's fixed split)."""
    mask = held_out_mask(pairs, fraction)
    return ([p for p, h in zip(pairs, mask, strict=True) if not h],
            [p for p, h in zip(pairs, mask, strict=True) if h])
