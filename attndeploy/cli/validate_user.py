"""`attndeploy validate --factory MODULE:FACTORY`: a user's model against its ONNX export.

The feeds are the factory's example inputs, then the same inputs resized over the declared
dynamic axes (`resized_feeds`): every dynamic dim at 1, every one at its example size + 3, and
the first dim name at 1 with the others at + 3. A resized integer or bool input repeats the
example's values along the resized axes (index modulo the example's size), so ids stay ids and
a right-padded mask keeps a real first token; a float input is drawn from a normal distribution
with the example's mean and spread. PyTorch eager is the reference (`validate.generic`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import ValidationError

GROW = 3  # a resized dim's size beyond the example's


def _dim_sizes(inputs: Mapping[str, np.ndarray],
               dynamic: Mapping[str, Mapping[int, str]]) -> dict[str, int]:
    """{dim name: its size in the example}, from the first input that declares it."""
    sizes: dict[str, int] = {}
    for name, axes in dynamic.items():
        for axis, dim in axes.items():
            sizes.setdefault(dim, int(inputs[name].shape[axis]))
    return sizes


def _resize(array: np.ndarray, axes: Mapping[int, int], rng: np.random.Generator) -> np.ndarray:
    """`array` with axis -> new size (see the module docstring)."""
    shape = list(array.shape)
    for axis, size in axes.items():
        shape[axis] = size
    if array.dtype.kind == "f":
        spread = float(array.std()) or 1.0
        return (rng.standard_normal(shape) * spread + float(array.mean())).astype(array.dtype)
    out = array
    for axis, size in axes.items():
        out = np.take(out, np.arange(size) % array.shape[axis], axis=axis)
    return np.ascontiguousarray(out)


def resized_feeds(inputs: Mapping[str, np.ndarray], dynamic: Mapping[str, Mapping[int, str]],
                  seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The example feed, then one feed per size assignment of the dynamic dims."""
    feeds = [dict(inputs)]
    sizes = _dim_sizes(inputs, dynamic)
    if not sizes:
        return feeds
    first = next(iter(sizes))
    assignments = [{d: 1 for d in sizes}, {d: n + GROW for d, n in sizes.items()}]
    if len(sizes) > 1:
        assignments.append({d: 1 if d == first else n + GROW for d, n in sizes.items()})
    for index, chosen in enumerate(assignments):
        rng = np.random.default_rng([seed, index])
        feeds.append({
            name: _resize(array, {axis: chosen[dim] for axis, dim in dynamic.get(name, {}).items()},
                          rng)
            for name, array in inputs.items()
        })
    return feeds


def validate_user_model(spec: str, weights: Path | None, onnx_path: Path, options: Any) -> Any:
    """The ValidationReport of `onnx_path` against the factory's module over `resized_feeds`."""
    import onnx

    from attndeploy.cli.user_model import describe, load_user_model
    from attndeploy.errors import AttnDeployError
    from attndeploy.validate.generic import validate_module

    if not onnx_path.is_file():
        raise ValidationError(f"ONNX file {onnx_path} does not exist")
    try:
        onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and others
        raise ValidationError(f"{onnx_path} is not an ONNX model: {describe(exc)}") from None
    user = load_user_model(spec, weights, stage="validation")
    inputs = {name: tensor.detach().cpu().numpy() for name, tensor in user.inputs.items()}
    feeds = resized_feeds(inputs, user.dynamic_shapes or {}, options.seed)
    try:
        return validate_module(user.module, onnx_path, options, feeds=feeds)
    except AttnDeployError:
        raise
    except Exception as exc:  # the user's forward may raise anything on a resized feed
        raise ValidationError(f"--factory {spec}: running the model failed: "
                              f"{describe(exc)}") from None
