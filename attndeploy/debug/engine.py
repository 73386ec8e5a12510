"""Collect the comparisons of every layer over every feed into `LayerResult`s.

Each value of a layer is compared with validate's rule (`validate.compare`): floats with
`compare_arrays` (an element fails only if |a - b| > atol AND |a - b| > rtol·|b|), bool values
exactly with `compare_gates` (a flip accepted only where the reference's gate logit is within
the flip tolerance of 0). Over several feeds a value keeps its worst comparison and the feed it
came from. Beside validate's statistics, each layer gets `rel_error` = ||a - b|| / ||b|| over the
finite elements of its float values (the largest over values and feeds), `input_error` the same
of the values that enter it, and once every feed is in `added_error` (see `report`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attndeploy.debug.inside import compare_value
from attndeploy.debug.report import LayerResult, worse
from attndeploy.validate.compare import Tolerance


def relative_error_norm(actual: np.ndarray, expected: np.ndarray) -> float | None:
    """||a - b|| / ||b|| over the elements finite in both (float64); 0 when both are 0,
    inf when only b is 0; None when nothing is comparable."""
    a = np.asarray(actual, np.float64)
    b = np.asarray(expected, np.float64)
    if a.shape != b.shape:
        return None
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return None
    diff = float(np.linalg.norm(a[finite] - b[finite]))
    norm = float(np.linalg.norm(b[finite]))
    if norm == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / norm


class Accumulator:
    """LayerResults keyed by (kind, index), filled feed by feed."""

    def __init__(self, tolerance: Tolerance, flip_tolerance: float) -> None:
        self.tolerance, self.flip_tolerance = tolerance, flip_tolerance
        self._layers: dict[tuple[str, int], LayerResult] = {}

    def layer(self, kind: str, index: int, label: str, op_type: str, scope: str | None,
              position: int, nodes: tuple[str, ...] = (),
              matmuls: tuple[str, ...] = ()) -> LayerResult:
        key = (kind, index)
        if key not in self._layers:
            self._layers[key] = LayerResult(kind, index, label, op_type, scope, position, nodes,
                                            matmuls)
        return self._layers[key]

    def add(self, layer: LayerResult, name: str, actual: np.ndarray, expected: np.ndarray,
            feed: str, *, gate_logits: np.ndarray | None = None,
            valid: np.ndarray | None = None, per_token: bool = False,
            agreement: Callable[[np.ndarray, np.ndarray], np.ndarray | None] | None = None,
            agreement_name: str = "") -> None:
        """Compare one value (`inside.compare_value`: `per_token` floats on `valid` only,
        `agreement` the decision a model family compares) and keep the worse comparison."""
        comparison = compare_value(name, actual, expected, self.tolerance,
                                   gate_logits=gate_logits, flip_tolerance=self.flip_tolerance,
                                   valid=valid, per_token=per_token, agreement=agreement,
                                   agreement_name=agreement_name)
        kept = worse(layer.values.get(name), comparison)
        if kept is comparison:
            layer.shapes[name] = feed
        layer.values[name] = kept
        if comparison.kind == "float":
            rel = relative_error_norm(actual, expected)
            if rel is not None:
                layer.rel_error = rel if layer.rel_error is None else max(layer.rel_error, rel)

    def add_input(self, layer: LayerResult, actual: np.ndarray, expected: np.ndarray) -> None:
        """A value that enters the layer: only its `rel_error` is kept (as `input_error`)."""
        if np.asarray(expected).dtype.kind != "f":
            return
        rel = relative_error_norm(actual, expected)
        if rel is not None:
            layer.input_error = rel if layer.input_error is None else max(layer.input_error, rel)

    def results(self) -> list[LayerResult]:
        """Every layer in graph order, with `added_error` set (not for outputs)."""
        layers = sorted(self._layers.values(), key=lambda r: (r.position, r.kind, r.index))
        for layer in layers:
            if layer.rel_error is not None and layer.kind != "output":
                layer.added_error = max(0.0, layer.rel_error - (layer.input_error or 0.0))
        return layers
