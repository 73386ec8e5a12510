"""Padding invariance in the exported graph (docs/ops.md "Model-level interface", docs/variants.md
C3).

Adding right padding to a request (more `seq` with `attention_mask` 0 and token id 0) must leave
the outputs of the real tokens unchanged: a text's outputs as a whole, a family's per-token
outputs (`attndeploy.validate.families`: token classification's logits) and gates at the real
positions. The check runs one runner (onnxruntime with all optimizations) twice per
shape, without and with `extra` padding columns, and compares under the same tolerance rule.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from attndeploy.validate.compare import (
    CompareResult,
    FamilyChecksLike,
    Tolerance,
    compare_outputs,
    per_token_outputs,
)
from attndeploy.validate.grid import Shape, make_inputs, valid_mask
from attndeploy.validate.runners import Runner

DEFAULT_EXTRA = 5


@dataclass
class PaddingCase:
    """One shape run without and with `extra` padding columns."""

    shape: Shape
    extra: int
    result: CompareResult

    @property
    def passed(self) -> bool:
        return self.result.passed

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": str(self.shape),
            "padded_seq": self.shape.seq + self.extra,
            "extra": self.extra,
            "passed": self.passed,
            "outputs": {name: r.to_json() for name, r in self.result.outputs.items()},
        }


def pad_right(feed: dict[str, np.ndarray], extra: int) -> dict[str, np.ndarray]:
    """The same requests with `extra` more padding columns (id 0, mask 0)."""
    return {name: np.pad(np.asarray(value), ((0, 0), (0, extra))) for name, value in feed.items()}


def unpad_outputs(outputs: dict[str, np.ndarray], seq: int,
                  per_token: Collection[str] = ()) -> dict[str, np.ndarray]:
    """`gates` and the per-token outputs named in `per_token` ([B, T, ...]) cut back to the
    first `seq` positions; per-example ones unchanged."""
    return {name: value[:, :seq] if name == "gates" or name in per_token else value
            for name, value in outputs.items()}


def check_padding(
    runner: Runner,
    shapes: tuple[Shape, ...],
    *,
    vocab_size: int,
    max_seq: int,
    tolerance: Tolerance,
    tagging: bool = False,
    seed: int = 0,
    extra: int = DEFAULT_EXTRA,
    checks: FamilyChecksLike | None = None,
) -> list[PaddingCase]:
    """Run each shape with and without padding in `runner` (already active) and compare.

    `checks`: the model family's checks part (its per-token outputs, its agreement); without
    it, `tagging` says whether `logits` are per token. Shapes already at `max_seq` get no
    padding and are skipped; padding is clipped to fit.
    """
    per_token = per_token_outputs(checks, tagging)
    cases = []
    for shape in shapes:
        room = min(extra, max_seq - shape.seq)
        if room < 1:
            continue
        feed = make_inputs(shape, vocab_size, seed)
        plain = runner.infer(feed)
        padded = unpad_outputs(runner.infer(pad_right(feed, room)), shape.seq, per_token)
        result = compare_outputs(
            padded, plain, tolerance, valid=valid_mask(feed), tagging=tagging, checks=checks,
            outputs=tuple(n for n in plain if n != "gate_logits"),
        )
        cases.append(PaddingCase(shape, room, result))
    return cases
