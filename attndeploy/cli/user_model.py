"""A user's model for the CLI: `--factory MODULE:FACTORY [--weights W.safetensors]`.

The factory protocol (what `export --factory` and `validate --factory` call):

    def build():                                  # no arguments
        model = MyModel()                         # any nn.Module (attndeploy.nn layers inside)
        inputs = {"x": torch.randn(2, 7, 4)}      # example inputs: model(**inputs)
        dynamic = {"x": {0: "batch", 1: "seq"}}   # optional: named dynamic axes
        return model, inputs, dynamic             # or (model, inputs)

MODULE is imported as `python -m` would import it: the current folder first on `sys.path`.
`--weights` loads a safetensors state dict into the model strictly: every parameter and buffer
of the model, no other name, the same shapes. Every failure is an ExportError (or, with
`stage="validation"`, a ValidationError) with one line that says what to change.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attndeploy.errors import ExportError, ValidationError

PROTOCOL = "the factory must return (module, inputs) or (module, inputs, dynamic_shapes)"
LISTED = 3  # names listed in a weights-mismatch message


@dataclass(frozen=True)
class UserModel:
    """What a factory gave: the module (weights loaded), its example inputs and dynamic axes."""

    spec: str  # "MODULE:FACTORY"
    module: Any  # torch.nn.Module
    inputs: dict[str, Any]  # name -> example tensor
    dynamic_shapes: dict[str, dict[int, str]] | None


def _fail(stage: str, message: str) -> Exception:
    return ValidationError(message) if stage == "validation" else ExportError(message)


def describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:200]}"


def parse_spec(spec: str, stage: str = "export") -> tuple[str, str]:
    """`MODULE:FACTORY` -> (module, factory); an error for any other form."""
    module, sep, factory = spec.partition(":")
    if not sep or not module or not factory.isidentifier() or ":" in factory:
        raise _fail(stage, f"--factory {spec!r} must be MODULE:FACTORY (e.g. my_pkg.models:build)")
    return module, factory


def import_factory(spec: str, stage: str = "export") -> Any:
    """The factory named by `spec`, imported with the current folder first on sys.path."""
    module_name, factory_name = parse_spec(spec, stage)
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise _fail(stage, f"--factory {spec}: no module named {exc.name!r} (looked in "
                               f"{cwd} and the installed packages)") from None
        raise _fail(stage, f"--factory {spec}: importing {module_name} failed: "
                           f"{describe(exc)}") from None
    except Exception as exc:  # the user's module may raise anything while importing
        raise _fail(stage, f"--factory {spec}: importing {module_name} failed: "
                           f"{describe(exc)}") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise _fail(stage, f"--factory {spec}: module {module_name} has no {factory_name!r}")
    if not callable(factory):
        raise _fail(stage, f"--factory {spec}: {factory_name} is a "
                           f"{type(factory).__name__}, not a function")
    return factory


def _check_result(spec: str, result: Any, stage: str) -> UserModel:
    import torch

    if not isinstance(result, tuple) or len(result) not in (2, 3):
        got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise _fail(stage, f"--factory {spec}: {PROTOCOL}; it returned {got}")
    module, inputs, *rest = result
    dynamic = rest[0] if rest else None
    if not isinstance(module, torch.nn.Module):
        raise _fail(stage, f"--factory {spec}: {PROTOCOL}; its module is a "
                           f"{type(module).__name__}, not a torch.nn.Module")
    if not isinstance(inputs, Mapping) or not inputs or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in inputs.items()):
        raise _fail(stage, f"--factory {spec}: its inputs must be a non-empty dict of input name "
                           "-> example tensor (model(**inputs))")
    if dynamic is not None and not (isinstance(dynamic, Mapping) and all(
            isinstance(axes, Mapping) and all(isinstance(a, int) and isinstance(n, str)
                                              for a, n in axes.items())
            for axes in dynamic.values())):
        raise _fail(stage, f"--factory {spec}: dynamic_shapes must be {{input: {{axis: name}}}}, "
                           "e.g. {'x': {0: 'batch', 1: 'seq'}}")
    dynamic_shapes = {k: dict(v) for k, v in dynamic.items()} if dynamic is not None else None
    return UserModel(spec, module, dict(inputs), dynamic_shapes)


def load_weights(module: Any, weights: Path, stage: str = "export") -> None:
    """Load the safetensors state dict `weights` into `module` strictly (see module docstring)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not weights.is_file():
        what = "is a folder" if weights.is_dir() else "does not exist"
        raise _fail(stage, f"weights file {weights} {what}")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as exc:
        raise _fail(stage, f"{weights} is not a readable safetensors file: "
                           f"{' '.join(str(exc).split())[:200]}") from None
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(f"{k} {list(state[k].shape)} (model {list(own[k].shape)})"
                    for k in set(own) & set(state) if state[k].shape != own[k].shape)
    problems = []
    for what, names in (("missing", missing), ("unexpected", unexpected),
                        ("wrong shape", shapes)):
        if names:
            more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
            problems.append(f"{len(names)} {what}: {', '.join(names[:LISTED])}{more}")
    if problems:
        raise _fail(stage, f"{weights} does not fit the model: {'; '.join(problems)}")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # e.g. a dtype torch cannot copy
        raise _fail(stage, f"{weights}: {' '.join(str(exc).split())[:200]}") from None


def load_user_model(spec: str, weights: Path | None = None, stage: str = "export") -> UserModel:
    """Import and call the factory, check what it returned, then load `weights` (if given)."""
    factory = import_factory(spec, stage)
    try:
        result = factory()
    except Exception as exc:  # the user's code may raise anything
        raise _fail(stage, f"--factory {spec}: the factory raised {describe(exc)}") from None
    user = _check_result(spec, result, stage)
    if weights is not None:
        load_weights(user.module, weights, stage)
    return user
