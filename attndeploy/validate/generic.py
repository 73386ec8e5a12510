"""Parity validation of any exported model against the PyTorch model it came from.

    report = validate_module(model, "model.onnx", grid="1x1,2x5,4x17", vocab_size=1000)
    report = validate_module(model, "model.onnx", feeds=[{"x": x, "mask": mask}, ...])

The same statistics, oracles and report as a checkpoint's validation (`validator`): PyTorch eager
in eval mode is the reference; onnxruntime with all and with no graph optimizations and the ONNX
reference evaluator (on the smallest feeds) are compared with it; every output is compared
(`compare.compare_arrays`, `compare.compare_gates`); then padding invariance in onnxruntime.

Inputs come from `feeds` (dicts of arrays or tensors, keyed by the ONNX input names) or from a
`grid` of (batch, seq) shapes. A grid fills every graph input from its declared dims: `batch`
and `seq` take the shape's sizes, static dims are kept (any other symbolic dim needs `feeds`).
The padding mask (`mask_input`; default the one bool [batch, seq] input, else `attention_mask`)
is right-padded with the lengths of `grid.Shape.lengths`; integer inputs are token ids in
[2, vocab_size) (0 at pads); float inputs are standard normal; other bool inputs random.

What is compared where: outputs whose dims start with [batch, seq] only at real tokens (when a
mask is known), others in full; bool outputs exactly (gates), a flip being accepted only where the
reference's `gate_logits` output (if the model has one) is within `gate_flip_tolerance` of 0.
Letters in shape comments: B batch, T seq.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import AttnDeployError, ValidationError
from attndeploy.runtime.names import ATTENTION_MASK, META_INLINED, META_OPSET
from attndeploy.validate.compare import (
    GATE_FLIP_TOLERANCE,
    CompareResult,
    Tolerance,
    compare_arrays,
    compare_gates,
    default_tolerance,
)
from attndeploy.validate.grid import FIRST_TOKEN_ID, Shape, as_shapes, default_reference_shapes
from attndeploy.validate.oracles import (
    ORT_ALL,
    REFERENCE,
    Progress,
    ValidationOptions,
    builtin_runner,
    run_oracle,
)
from attndeploy.validate.padding import DEFAULT_EXTRA, PaddingCase
from attndeploy.validate.report import ValidationReport, environment
from attndeploy.validate.runners import BaseRunner, Feed, Outputs

BATCH, SEQ = "batch", "seq"
GATE_LOGITS = "gate_logits"


@dataclass(frozen=True, order=True)
class FeedShape(Shape):
    """The (batch, seq) of one user-given feed, numbered so equal shapes stay apart."""

    index: int = 0
    real: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"feed{self.index}:{self.batch}x{self.seq}"

    def lengths(self, seed: int = 0) -> tuple[int, ...]:
        return self.real or super().lengths(seed)


@dataclass(frozen=True)
class _Value:
    """One graph input or output: name, numpy dtype, dims (ints or symbol names)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str, ...]

    @property
    def per_token(self) -> bool:
        return self.dims[:2] == (BATCH, SEQ)


def _values(values: Sequence[Any]) -> list[_Value]:
    import onnx.helper

    out = []
    for value in values:
        tensor = value.type.tensor_type
        dims = tuple(d.dim_param or d.dim_value for d in tensor.shape.dim)
        out.append(_Value(value.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(
            tensor.elem_type)), dims))
    return out


class ModuleRunner(BaseRunner):
    """Any nn.Module as the reference: model(**feed) in eval mode under inference_mode, the
    outputs named as the ONNX graph names them (`export.generic.output_items`)."""

    def __init__(self, model: Any, output_names: Sequence[str], name: str = "torch") -> None:
        super().__init__()
        self.model, self.output_names, self.name = model, list(output_names), name
        self._flags: dict[Any, bool] = {}

    def _activate(self) -> None:
        self._flags = {module: module.training for module in self.model.modules()}
        self.model.eval()

    def _deactivate(self) -> None:
        for module, training in self._flags.items():
            module.training = training

    def infer(self, feed: Feed) -> Outputs:
        import torch

        from attndeploy.export.generic import output_items

        self._require_active()
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in feed.items()}
        with torch.inference_mode():
            raw = self.model(**tensors)
        items = output_items(raw, self.output_names)
        return {name: value.detach().cpu().numpy() for name, value in items}


# ----------------------------------------------------------------------------- inputs


def _mask_input(inputs: list[_Value], requested: str | None) -> _Value | None:
    by_name = {v.name: v for v in inputs}
    if requested is not None:
        if requested not in by_name:
            raise ValidationError(f"mask_input {requested!r} is not an input; inputs: "
                                  f"{sorted(by_name)}")
        return by_name[requested]
    masks = [v for v in inputs if v.dtype == np.bool_ and v.dims == (BATCH, SEQ)]
    if len(masks) == 1:
        return masks[0]
    attention_mask = by_name.get(ATTENTION_MASK)
    return attention_mask if attention_mask is not None and attention_mask.per_token else None


def grid_feed(shape: Shape, inputs: list[_Value], mask: _Value | None, vocab_size: int | None,
              seed: int) -> dict[str, np.ndarray]:
    """Inputs for one grid shape (module docstring)."""
    lengths = np.array(shape.lengths(seed))  # [B]
    real = np.arange(shape.seq)[None, :] < lengths[:, None]  # [B, T]
    feed = {}
    for index, value in enumerate(inputs):
        sizes = []
        for dim in value.dims:
            if isinstance(dim, int) and dim > 0:
                sizes.append(dim)
            elif dim in (BATCH, SEQ):
                sizes.append(shape.batch if dim == BATCH else shape.seq)
            else:
                raise ValidationError(f"input {value.name} has dim {dim!r}: a grid fills only "
                                      f"'{BATCH}' and '{SEQ}'; give feeds= instead")
        rng = np.random.default_rng([seed, shape.batch, shape.seq, index])
        if mask is not None and value.name == mask.name:
            feed[value.name] = real.astype(value.dtype)
        elif value.dtype.kind in "iu":
            if vocab_size is None or vocab_size <= FIRST_TOKEN_ID:
                raise ValidationError(f"integer input {value.name}: give vocab_size (> "
                                      f"{FIRST_TOKEN_ID}) to draw token ids, or feeds=")
            ids = rng.integers(FIRST_TOKEN_ID, vocab_size, size=sizes)
            feed[value.name] = np.where(real, ids, 0).astype(value.dtype) if value.per_token \
                else ids.astype(value.dtype)
        elif value.dtype == np.bool_:
            feed[value.name] = rng.random(sizes) < 0.5
        else:
            feed[value.name] = rng.standard_normal(sizes).astype(value.dtype)
    return feed


def _numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def _feed_shapes(feeds: Sequence[Mapping[str, Any]], mask: _Value | None,
                 inputs: list[_Value]) -> dict[Shape, dict[str, np.ndarray]]:
    names = [v.name for v in inputs]
    out: dict[Shape, dict[str, np.ndarray]] = {}
    for index, raw in enumerate(feeds):
        feed = {k: _numpy(v) for k, v in raw.items()}
        if sorted(feed) != sorted(names):
            raise ValidationError(f"feed {index} has inputs {sorted(feed)}, the graph takes "
                                  f"{sorted(names)}")
        first = feed[names[0]]
        batch = int(first.shape[0]) if first.ndim else 1
        seq = int(first.shape[1]) if first.ndim > 1 else 1
        real: tuple[int, ...] = ()
        if mask is not None:
            valid = feed[mask.name] != 0  # [B, T]
            batch, seq = valid.shape
            real = tuple(int(n) for n in valid.sum(-1))
        out[FeedShape(batch, seq, index, real)] = feed
    return out


# ----------------------------------------------------------------------------- comparison


class _Comparer:
    """Every output of one run against the reference (gates first, as `compare_outputs`)."""

    def __init__(self, outputs: list[_Value], tolerances: Mapping[str, Tolerance],
                 flip_tolerance: float, has_mask: bool) -> None:
        self.outputs, self.tolerances = outputs, tolerances
        self.flip_tolerance, self.has_mask = flip_tolerance, has_mask

    def __call__(self, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                 valid: np.ndarray | None) -> CompareResult:
        from attndeploy.validate.compare import _missing

        results, excluded = {}, set()
        gate_logits = want.get(GATE_LOGITS)
        for out in (o for o in self.outputs if o.dtype == np.bool_):
            if out.name not in got:
                results[out.name] = _missing(out.name, "gates")
                continue
            mask = valid if out.per_token and self.has_mask else None
            gates = compare_gates(out.name, got[out.name], want[out.name],
                                  gate_logits if out.per_token else None, valid=mask,
                                  flip_tolerance=self.flip_tolerance)
            results[out.name] = gates
            if gates.passed and gates.flips:
                excluded.update(gates.flipped_examples)
        keep = None
        if excluded:
            keep = np.ones(len(next(iter(want.values()))), bool)
            keep[sorted(excluded)] = False
        for out in (o for o in self.outputs if o.dtype != np.bool_):
            if out.name not in got:
                results[out.name] = _missing(out.name, "float")
                continue
            tolerance = self.tolerances.get(out.name) or self.tolerances["*"]
            mask = valid if out.per_token and self.has_mask else None
            results[out.name] = compare_arrays(
                out.name, got[out.name], want[out.name], tolerance, valid=mask,
                argmax=out.name == "logits", examples=keep,
            )
        ordered = {o.name: results[o.name] for o in self.outputs}
        return CompareResult(ordered, tuple(sorted(excluded)))


def _cut(value: np.ndarray, dims: tuple[int | str, ...], seq: int) -> np.ndarray:
    """An output of a padded run cut back to `seq` along its `seq` axes."""
    index = tuple(slice(0, seq) if dim == SEQ else slice(None) for dim in dims)
    return value[index] if len(dims) == value.ndim else value


def _padding_cases(runner: Any, feeds: dict[Shape, dict[str, np.ndarray]],
                   inputs: list[_Value], outputs: list[_Value], compare: _Comparer,
                   mask: _Value) -> list[PaddingCase]:
    cases = []
    for shape, feed in feeds.items():
        padded = {}
        for value in inputs:
            widths = [(0, DEFAULT_EXTRA if dim == SEQ else 0) for dim in value.dims]
            padded[value.name] = np.pad(feed[value.name], widths)  # 0 / False = padding
        plain, more = runner.infer(feed), runner.infer(padded)
        cut = {o.name: _cut(more[o.name], o.dims, shape.seq) for o in outputs if o.name in more}
        result = compare(cut, plain, feed[mask.name] != 0)
        cases.append(PaddingCase(shape, DEFAULT_EXTRA, result))
    return cases


# ----------------------------------------------------------------------------- entry point


def validate_module(
    model: Any,
    onnx_path: Path | str,
    options: ValidationOptions | None = None,
    *,
    feeds: Sequence[Mapping[str, Any]] | None = None,
    grid: Any = None,
    mask_input: str | None = None,
    vocab_size: int | None = None,
) -> ValidationReport:
    """Validate `onnx_path` against `model` (an nn.Module) over `feeds` or a `grid`.

    Raises ValidationError only when validation cannot start; a validation that runs and fails
    returns a report with `passed` false (`report.raise_for_failure()` raises).
    """
    import onnx

    options = options or ValidationOptions()
    started = time.perf_counter()
    onnx_path = Path(onnx_path)
    if not onnx_path.is_file():
        raise ValidationError(f"ONNX file {onnx_path} does not exist")
    if (feeds is None) == (grid is None and options.shapes is None):
        raise ValidationError("give exactly one of feeds= (a list of input dicts) or grid= "
                              "(shapes such as '1x1,2x5,4x17')")
    graph = onnx.load(str(onnx_path), load_external_data=False)
    inputs, outputs = _values(graph.graph.input), _values(graph.graph.output)
    metadata = {p.key: p.value for p in graph.metadata_props}
    mask = _mask_input(inputs, mask_input)
    if feeds is not None:
        all_feeds = _feed_shapes(feeds, mask, inputs)
        shapes = tuple(all_feeds)
    else:
        shapes = as_shapes(grid if grid is not None else options.shapes)
        all_feeds = {s: grid_feed(s, inputs, mask, vocab_size, options.seed) for s in shapes}
    if options.reference_shapes is None:
        reference_shapes = default_reference_shapes(shapes)
    elif feeds is None and options.reference_shapes:
        reference_shapes = as_shapes(options.reference_shapes)
        all_feeds.update({s: grid_feed(s, inputs, mask, vocab_size, options.seed)
                          for s in reference_shapes if s not in all_feeds})
    else:
        reference_shapes = ()
    run_reference = REFERENCE in options.oracles and bool(reference_shapes)
    floats = [o for o in outputs if o.dtype != np.bool_]
    dtype = "float16" if any(o.dtype == np.float16 for o in floats) else "float32"
    base = default_tolerance(dtype)
    tolerance = Tolerance(base.atol if options.atol is None else options.atol,
                          base.rtol if options.rtol is None else options.rtol)
    per_output = {}
    for name, tol in options.per_output.items():
        if name not in {o.name for o in floats}:
            raise ValidationError(f"no float output {name!r} to set a tolerance for; valid: "
                                  f"{', '.join(o.name for o in floats)}")
        per_output[name] = tol if isinstance(tol, Tolerance) else Tolerance(*map(float, tol))
    flip_tolerance = options.gate_flip_tolerance
    if flip_tolerance is None:
        flip_tolerance = GATE_FLIP_TOLERANCE if dtype == "float32" else 1e-2
    compare = _Comparer(outputs, {"*": tolerance, **per_output}, flip_tolerance, mask is not None)
    builtins = [n for n in options.oracles if n != REFERENCE or run_reference]
    steps = len(shapes) * (1 + len(options.extra_runners)) + sum(
        len(reference_shapes) if n == REFERENCE else len(shapes) for n in builtins)
    progress = Progress(options.progress, steps)
    load_s = time.perf_counter() - started

    t0 = time.perf_counter()
    expected = {}
    with ModuleRunner(model, [o.name for o in outputs]) as reference:
        for shape, feed in all_feeds.items():
            expected[shape] = reference.infer(feed)
            if shape in shapes:
                progress.step(f"torch {shape}")
    reference_s = time.perf_counter() - t0

    def valid_of(feed: dict[str, np.ndarray]) -> np.ndarray:
        if mask is not None:
            return feed[mask.name] != 0  # [B, T]
        first = next(iter(feed.values()))
        return np.ones(first.shape[:2], bool)  # [B, T]: every token real

    oracles, notes = {}, []
    for name in builtins:
        runner = builtin_runner(name, onnx_path, options)
        run_shapes = reference_shapes if name == REFERENCE else shapes
        note = ("onnx.reference.ReferenceEvaluator is a slow pure-numpy implementation: run on "
                f"{', '.join(map(str, reference_shapes))} only") if name == REFERENCE else ""
        if note:
            notes.append(note)
        oracles[name] = run_oracle(runner, run_shapes, all_feeds, expected, compare, progress,
                                    note, valid_of)
    for runner in options.extra_runners:
        oracles[runner.name] = run_oracle(runner, shapes, all_feeds, expected, compare,
                                           progress, "", valid_of)
    padding, padding_s = None, 0.0
    if options.padding_check and mask is not None and ORT_ALL in options.oracles:
        t0 = time.perf_counter()
        try:
            with builtin_runner(ORT_ALL, onnx_path, options) as runner:
                padding = _padding_cases(runner, {s: all_feeds[s] for s in shapes}, inputs,
                                         outputs, compare, mask)
        except AttnDeployError as exc:
            notes.append(f"padding check not run: {exc}")
        padding_s = time.perf_counter() - t0
    elif options.padding_check:
        notes.append("padding check not run: it needs a padding mask input and the "
                     f"{ORT_ALL} oracle")
    progress.finish()
    gated = any(o.dtype == np.bool_ for o in outputs)
    if gated:
        notes.append("bool outputs (gates) are compared exactly on real tokens; a flip is "
                     f"accepted only where the reference's {GATE_LOGITS!r} output has |s| < "
                     f"{flip_tolerance:g}")
    model_info = {
        "onnx_path": str(onnx_path), "checkpoint": None, "variant": None, "family": "custom",
        "head": None, "dtype": dtype, "opset": metadata.get(META_OPSET),
        "max_seq": None, "inlined": metadata.get(META_INLINED) == "true",
        "weights_sha256": None, "labels": [], "module": type(model).__name__,
        "inputs": [v.name for v in inputs], "outputs": [o.name for o in outputs],
        "mask_input": mask.name if mask is not None else None,
    }
    timings = {
        "total_s": round(time.perf_counter() - started, 3), "load_s": round(load_s, 3),
        "reference_s": round(reference_s, 3), "padding_s": round(padding_s, 3),
        "oracles": {name: round(o.seconds, 3) for name, o in oracles.items()},
    }
    return ValidationReport(
        model=model_info, tolerance=tolerance, per_output=per_output,
        gate_flip_tolerance=flip_tolerance,
        shapes=[(s, s.lengths(options.seed)) for s in shapes], oracles=oracles,
        padding=padding, padding_runner=ORT_ALL, gated=gated, timings=timings,
        environment=environment(), notes=notes,
    )
