"""The result of comparing two exported decoders step by step (`decoder_compare`): per decode
step the logits' error and each cache entry's, per layer how the error grows, as data, JSON and
PNG.

Layer of a cache entry: the name between `present.` and the next dot (`present.3.key` -> "3";
GA-Net's shared gate-network state `present.gates.*` -> "gates"). A layer's error at a step is
the largest relative error ||a - b|| / ||b|| of its entries; `added` is that at the last step
less the previous layer's (in graph order), so `ranked()` names the layers where the difference
grows, as `DebugReport.ranked()` does for an encoder's blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.debug.report import short
from attndeploy.fsutil import atomic_write_text
from attndeploy.validate.compare import Tolerance, json_float

SCHEMA = "attndeploy-debug-compare-decoder"
SCHEMA_VERSION = 1


@dataclass
class Difference:
    """One value of both models at one step: largest |a - b|, ||a - b|| / ||b|| (bool entries:
    how many places differ), and whether it is within the tolerance."""

    max_abs: float
    rel_error: float
    passed: bool
    flips: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"max_abs": json_float(self.max_abs), "rel_error": json_float(self.rel_error),
                "passed": self.passed, "flips": self.flips}


@dataclass
class StepResult:
    """Step 0 is the prefill (every real prompt token), step k > 0 the k-th decode step."""

    step: int
    logits: Difference
    state: dict[str, Difference]  # by present name, in the graph's order
    same_token: float  # share of rows whose greedy token is the reference's

    @property
    def passed(self) -> bool:
        return self.logits.passed and all(d.passed for d in self.state.values())

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "passed": self.passed, "logits": self.logits.to_json(),
                "same_token": self.same_token,
                "state": {name: d.to_json() for name, d in self.state.items()}}


def layer_of(present: str) -> str:
    """`present.3.key` -> "3", `present.gates.x` -> "gates"."""
    parts = present.split(".")
    return parts[1] if len(parts) > 2 else present


@dataclass
class LayerGrowth:
    layer: str
    entries: list[str]
    rel_error: list[float]  # per step: the largest of its entries
    added: float  # at the last step, over the previous layer's

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "entries": self.entries,
                "rel_error": [json_float(v) for v in self.rel_error],
                "added": json_float(self.added)}


@dataclass
class DecoderDebugReport:
    reference: str
    candidate: str
    tolerance: Tolerance
    shape: tuple[int, int]  # prompts x the longest prompt
    steps: list[StepResult]
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(step.passed for step in self.steps)

    @property
    def first_divergence(self) -> tuple[int, str] | None:
        """(step, the first cache entry out of tolerance, else "logits"), or None."""
        for step in self.steps:
            for name, difference in step.state.items():
                if not difference.passed:
                    return step.step, name
            if not step.logits.passed:
                return step.step, "logits"
        return None

    @property
    def verdict(self) -> str:
        first = self.first_divergence
        if first is None:
            return (f"no divergence: logits and every cache entry agree within atol "
                    f"{short(self.tolerance.atol)} and rtol {short(self.tolerance.rtol)} over "
                    f"{len(self.steps) - 1} decode steps")
        step, name = first
        when = "prefill" if step == 0 else f"decode step {step}"
        worst = max(self.steps[-1].logits.max_abs, 0.0)
        return (f"first divergence: {name} at {when}; logits at the last step max|Δ| "
                f"{short(worst)}, greedy tokens equal on "
                f"{self.steps[-1].same_token:.0%} of the rows")

    def layers(self) -> list[LayerGrowth]:
        """Each layer's relative error per step, and what it adds over the previous one."""
        grouped: dict[str, list[str]] = {}
        for name in self.steps[0].state:
            grouped.setdefault(layer_of(name), []).append(name)
        result, previous = [], 0.0
        for layer, names in grouped.items():
            errors = [max(step.state[n].rel_error for n in names) for step in self.steps]
            result.append(LayerGrowth(layer, names, errors, errors[-1] - previous))
            previous = errors[-1]
        return result

    def ranked(self) -> list[LayerGrowth]:
        """The layers, the largest added error (at the last step) first."""
        return sorted(self.layers(), key=lambda layer: -layer.added)

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "passed": self.passed,
            "verdict": self.verdict, "reference": self.reference, "candidate": self.candidate,
            "tolerance": self.tolerance.to_json(), "shape": list(self.shape),
            "first_divergence": None if first is None else {"step": first[0],
                                                            "value": first[1]},
            "steps": [step.to_json() for step in self.steps],
            "layers": [layer.to_json() for layer in self.layers()],
            "ranked": [layer.layer for layer in self.ranked()],
            "notes": self.notes, "timings": self.timings,
        }

    def write_json(self, path: Path | str) -> Path:
        atomic_write_text(Path(path), json.dumps(self.to_json(), indent=2) + "\n")
        return Path(path)

    def write_plot(self, path: Path | str) -> Path:
        from attndeploy.debug.decoder_plot import write_decoder_plot

        return write_decoder_plot(self, Path(path))
