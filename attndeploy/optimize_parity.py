"""Does an optimized model compute what its input did? Both run in onnxruntime on the same
feeds (`attndeploy.optimize`'s first test, before speed).

A checkpoint's export (`Subject.meta`) is fed `attndeploy.validate.grid`'s inputs and its
outputs compared as `validate` compares them, GA-Net's gates exactly; any other ONNX model is fed
random tensors from its input signature (`attndeploy.optimize_feeds`) and every output compared,
floats within the dtype's default tolerance, others exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from attndeploy.errors import ExportError
from attndeploy.optimize_feeds import InputSpec, dim_bounds, grid_shape, input_specs, random_feed
from attndeploy.optimize_speed import session_of
from attndeploy.runtime.metadata import REQUIRED, ModelMetadata, parse_metadata
from attndeploy.runtime.names import META_DTYPE, META_VERSION

# (batch, seq) of the parity feeds; seq is clipped to the model's max_seq
PARITY_SHAPES = ((1, 1), (2, 5), (3, 17), (2, 64))


def first_line(exc: BaseException) -> str:
    """An exception's first line, for a one-line error (its type where it has no text)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Subject:
    """What the input model is: a checkpoint's export (`meta`: its vocabulary, max_seq and
    family checks) or any other ONNX model (`specs`: its input signature, `bounds`: the dim
    bounds its metadata records; `attndeploy.optimize_feeds`)."""

    meta: ModelMetadata | None
    specs: list[InputSpec]
    bounds: dict[str, tuple[int, int | None]]
    dtype: str

    @property
    def generic(self) -> bool:
        return self.meta is None

    def feed(self, batch: int, seq: int) -> tuple[str, dict[str, np.ndarray]]:
        """(shape label, feed) at grid shape batch x seq, seq clipped to what the model takes."""
        if self.meta is not None:
            from attndeploy.validate.grid import Shape, make_inputs

            shape = Shape(batch, min(seq, self.meta.max_seq))
            return str(shape), make_inputs(shape, self.meta.vocab_size)
        b, s = grid_shape(self.specs, (batch, seq), self.bounds)
        return f"{b}x{s}", random_feed(self.specs, (batch, seq), self.bounds)

    def feeds(self, shapes: Sequence[tuple[int, int]]) -> dict[str, dict[str, np.ndarray]]:
        """{shape label: feed}, one per distinct shape once clipped."""
        out: dict[str, dict[str, np.ndarray]] = {}
        for batch, seq in shapes:
            label, feed = self.feed(batch, seq)
            out.setdefault(label, feed)
        return out


def read_subject(model: onnx.ModelProto, metadata: dict[str, str], source: Path) -> Subject:
    """A checkpoint's export when the metadata holds any of a checkpoint's keys (read, and
    refused when wrong, by `parse_metadata`), else any model, read from its signature."""
    specs = input_specs(model)
    dtype = metadata.get(META_DTYPE) or _float_dtype(model)
    if any(key in metadata for key in REQUIRED if key != META_VERSION):
        meta = parse_metadata(metadata, str(source), outputs=[o.name for o in model.graph.output])
        return Subject(meta, specs, {}, dtype)
    return Subject(None, specs, dim_bounds(metadata), dtype)


def _float_dtype(model: onnx.ModelProto) -> str:
    """float16 when the model's inputs or weights are float16, else float32 (the tolerance)."""
    half = onnx.TensorProto.FLOAT16
    types = [v.type.tensor_type.elem_type for v in model.graph.input]
    types += [t.data_type for t in model.graph.initializer]
    return "float16" if half in types else "float32"


def _compare_any(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], dtype: str
                 ) -> tuple[dict[str, float], str | None]:
    """Every output of a model without a family: floats within the dtype's default tolerance
    (`attndeploy.validate.compare`'s rule), others exactly. (max abs per float output, the
    first failure's message or None)."""
    from attndeploy.validate.compare import default_tolerance

    tolerance = default_tolerance(dtype)
    max_abs: dict[str, float] = {}
    for name, want in expected.items():
        got = actual[name]
        if got.shape != want.shape:
            return max_abs, f"{name} has shape {got.shape}, the input model's {want.shape}"
        if want.dtype.kind != "f":
            if not np.array_equal(got, want):
                return max_abs, f"{name} differs ({int((got != want).sum())} elements)"
            continue
        a, b = got.astype(np.float64), want.astype(np.float64)
        if not (np.isfinite(a) == np.isfinite(b)).all() or not np.isfinite(b).all():
            return max_abs, f"{name} holds non-finite values"
        error = np.abs(a - b)
        max_abs[name] = float(error.max()) if error.size else 0.0
        failing = (error > tolerance.atol) & (error > tolerance.rtol * np.abs(b))
        if failing.any():
            return max_abs, (f"{name}: {int(failing.sum())} elements beyond atol "
                             f"{tolerance.atol:g} and rtol {tolerance.rtol:g} (max abs "
                             f"{max_abs[name]:.3g})")
    return max_abs, None


def check_parity(original: Path, optimized: onnx.ModelProto, subject: Subject
                 ) -> list[dict[str, Any]]:
    """Run both models on the `PARITY_SHAPES` feeds; ExportError naming the first output that
    differs beyond the dtype's default tolerance. Returns the max abs error per shape/output."""
    try:
        sessions = {"input": session_of(original), "optimized": session_of(optimized)}
    except Exception as exc:  # onnxruntime raises its own pybind types
        raise ExportError(f"onnxruntime cannot load the optimized model: "
                          f"{first_line(exc)}") from exc
    names = [o.name for o in sessions["input"].get_outputs()]
    report = []
    for shape, feed in subject.feeds(PARITY_SHAPES).items():
        try:
            outputs = {k: dict(zip(names, s.run(names, feed), strict=True))
                       for k, s in sessions.items()}
        except Exception as exc:  # onnxruntime's pybind errors: a feed the model refuses
            raise ExportError(f"onnxruntime cannot run the models at shape {shape}: "
                              f"{first_line(exc)}") from exc
        if subject.meta is None:
            max_abs, failure = _compare_any(outputs["optimized"], outputs["input"],
                                            subject.dtype)
            if failure:
                raise ExportError(f"the optimized model's {failure} at shape {shape}, against "
                                  f"the input model's; nothing written")
            report.append({"shape": shape, "max_abs": max_abs, "gate_flips": {}})
            continue
        report.append(_compare_checkpoint_outputs(outputs, feed, shape, subject))
    return report


def _compare_checkpoint_outputs(outputs: dict[str, dict[str, np.ndarray]],
                                feed: dict[str, np.ndarray], shape: str, subject: Subject
                                ) -> dict[str, Any]:
    from attndeploy.validate.compare import compare_outputs, default_tolerance
    from attndeploy.validate.families import family_checks
    from attndeploy.validate.grid import valid_mask

    assert subject.meta is not None
    checks = family_checks(subject.meta.head)  # its per-token outputs: real tokens only
    result = compare_outputs(outputs["optimized"], outputs["input"],
                             default_tolerance(subject.dtype), valid=valid_mask(feed),
                             checks=checks)
    if not result:
        name = result.failures[0]
        raise ExportError(
            f"the optimized model's {name} differs from the input model's at shape {shape}:"
            f" {result.outputs[name].message}; nothing written"
        )
    return {
        "shape": shape,
        "max_abs": {n: c.max_abs for n, c in result.outputs.items() if c.kind == "float"},
        "gate_flips": {n: c.flips for n, c in result.outputs.items() if c.kind == "gates"},
    }
