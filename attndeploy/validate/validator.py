"""`validate_model`: does an exported ONNX file compute what its checkpoint computes?

(Or what any PyTorch model computes: `validate_model(model, onnx_path, feeds=... | grid=...)`
runs `attndeploy.validate.generic` with the same oracles, statistics and report.)

PyTorch eager (the checkpoint's fp32 model) is the reference. The oracles compared with it are
onnxruntime with all graph optimizations, onnxruntime with none, and the ONNX reference evaluator
(an independent numpy implementation of ONNX; slow, so it runs on `reference_shapes` only), plus
any runner the caller adds (e.g. the Triton client). Every oracle runs every shape; every output
is compared; all results are collected into a `ValidationReport` that is returned whether it
passed or not (the CLI writes it either way and exits non-zero on failure).

Refused before anything runs (ValidationError): an ONNX file without attndeploy metadata, one
exported from another checkpoint (weights SHA-256), and shapes longer than the graph's max_seq.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.checkpoint import Checkpoint, read_checkpoint
from attndeploy.errors import AttnDeployError, ValidationError
from attndeploy.interface import model_interface
from attndeploy.validate.compare import (
    GATE_FLIP_TOLERANCE,
    Tolerance,
    compare_outputs,
    default_tolerance,
)
from attndeploy.validate.families import FamilyChecks, family_checks
from attndeploy.validate.grid import (
    Shape,
    as_shapes,
    check_shapes,
    default_reference_shapes,
    make_inputs,
)
from attndeploy.validate.oracles import (  # noqa: F401  (re-exported: their old home)
    ORACLES,
    ORT_ALL,
    ORT_NONE,
    REFERENCE,
    Progress,
    ProgressCallback,
    ShapesSpec,
    ValidationOptions,
    builtin_runner,
    run_oracle,
)
from attndeploy.validate.padding import check_padding
from attndeploy.validate.report import OracleResult, ValidationReport, environment
from attndeploy.validate.runners import TorchRunner
from attndeploy.variants.registry import variant_spec

# fp16 graphs: a gate logit within this of 0 may round either way (fp16 has ~3 decimal digits)
FP16_GATE_FLIP_TOLERANCE = 1e-2



@dataclass(frozen=True)
class _Target:
    """What the ONNX file says about itself, checked against the checkpoint."""

    path: Path
    metadata: dict[str, str]
    dtype: str
    max_seq: int
    gated: bool
    checks: FamilyChecks  # the model family's checks part: per-token outputs, agreement, grid
    output_names: tuple[str, ...]

    @property
    def tagging(self) -> bool:
        """Whether `logits` are compared per token (kept for callers of the old field)."""
        return "logits" in self.checks.per_token_outputs


def _read_target(onnx_path: Path, ckpt: Checkpoint) -> _Target:
    from attndeploy.export.exporter import read_metadata

    if onnx_path.is_dir():
        raise ValidationError(f"{onnx_path} is a folder; give the exported ONNX file")
    if not onnx_path.is_file():
        raise ValidationError(f"ONNX file {onnx_path} does not exist")
    try:
        metadata = read_metadata(onnx_path)
    except Exception as exc:  # protobuf raises DecodeError and others; keep the message
        raise ValidationError(f"{onnx_path} is not a readable ONNX file: {exc}") from exc
    if not metadata.get("weights_sha256") or not metadata.get("variant"):
        raise ValidationError(
            f"{onnx_path} was not made by attndeploy export (it has no attndeploy metadata); "
            "export the checkpoint with `attndeploy export` and validate that file"
        )
    if metadata["weights_sha256"] != ckpt.weights_sha256:
        raise ValidationError(
            f"the ONNX file was exported from a different checkpoint: {onnx_path} records "
            f"weights sha256 {metadata['weights_sha256']}, checkpoint {ckpt.path} has "
            f"{ckpt.weights_sha256}"
        )
    config = ckpt.model_config
    dtype = metadata.get("dtype", "float32")
    if dtype not in ("float32", "float16"):
        raise ValidationError(f"{onnx_path}: unsupported dtype {dtype!r} in its metadata")
    try:
        max_seq = int(metadata.get("max_seq") or config.max_seq)
    except ValueError as exc:
        raise ValidationError(f"{onnx_path}: bad max_seq {metadata.get('max_seq')!r}") from exc
    gated = variant_spec(config.variant).gated
    # a CRF tagger's tag_ids too; a converted Hugging Face model's config has no tag head
    interface = model_interface(head=config.head, num_labels=config.num_labels, gated=gated,
                                tag_head=getattr(config, "tag_head", "softmax"))
    return _Target(onnx_path, metadata, dtype, min(max_seq, config.max_seq), gated,
                   family_checks(config.head), tuple(interface.output_names))


def _tolerances(options: ValidationOptions, target: _Target) -> tuple[Tolerance, dict]:
    base = default_tolerance(target.dtype)
    tolerance = Tolerance(
        base.atol if options.atol is None else options.atol,
        base.rtol if options.rtol is None else options.rtol,
    )
    per_output: dict[str, Tolerance] = {}
    for name, tol in options.per_output.items():
        if name not in target.output_names or name == "gates":
            floats = [n for n in target.output_names if n != "gates"]
            raise ValidationError(
                f"no float output {name!r} to set a tolerance for; valid: {', '.join(floats)}"
            )
        per_output[name] = tol if isinstance(tol, Tolerance) else Tolerance(*map(float, tol))
    return tolerance, per_output


def validate_model(
    checkpoint_dir: Path | str | Any,
    onnx_path: Path | str,
    options: ValidationOptions | None = None,
    *,
    feeds: Sequence[Mapping[str, Any]] | None = None,
    grid: ShapesSpec | None = None,
    mask_input: str | None = None,
    vocab_size: int | None = None,
) -> ValidationReport:
    """Validate `onnx_path` against the checkpoint it was exported from; return the report.

    A PyTorch module (any nn.Module, e.g. one exported with `export_model`) has its own entry
    point, `validate_module`; passed here as `checkpoint_dir` it still goes there, with a
    DeprecationWarning (`feeds`, `grid`, `mask_input` and `vocab_size` are its arguments).
    Raises ValidationError only when validation cannot start (see the module docstring); a
    validation that runs and fails returns a report with `passed` false.
    """
    if not isinstance(checkpoint_dir, (str, Path)):
        import warnings

        from attndeploy.validate.generic import validate_module

        warnings.warn("validate_model(module, ...) is deprecated; call validate_module(module, "
                      "...) (attndeploy.validate)", DeprecationWarning, stacklevel=2)
        return validate_module(checkpoint_dir, onnx_path, options, feeds=feeds, grid=grid,
                               mask_input=mask_input, vocab_size=vocab_size)
    if feeds is not None or grid is not None:
        raise ValidationError("feeds= and grid= validate an nn.Module; a checkpoint takes its "
                              "shapes from ValidationOptions(shapes=...)")
    options = options or ValidationOptions()
    started = time.perf_counter()
    onnx_path = Path(onnx_path)
    ckpt = read_checkpoint(Path(checkpoint_dir))
    target = _read_target(onnx_path, ckpt)
    config = ckpt.model_config

    shapes = (target.checks.validation_grid(target.max_seq) if options.shapes is None
              else as_shapes(options.shapes))
    check_shapes(shapes, target.max_seq, f"{onnx_path} (metadata max_seq)")
    run_reference = REFERENCE in options.oracles
    if options.reference_shapes is None:
        reference_shapes = default_reference_shapes(shapes)
    else:
        reference_shapes = as_shapes(options.reference_shapes) if options.reference_shapes else ()
        check_shapes(reference_shapes, target.max_seq, f"{onnx_path} (metadata max_seq)")
    if not reference_shapes:
        run_reference = False
    tolerance, per_output = _tolerances(options, target)
    flip_tolerance = options.gate_flip_tolerance
    if flip_tolerance is None:
        flip_tolerance = GATE_FLIP_TOLERANCE if target.dtype == "float32" else \
            FP16_GATE_FLIP_TOLERANCE
    tolerances = {"*": tolerance, **per_output}

    builtins = [name for name in options.oracles if name != REFERENCE or run_reference]
    steps = len(shapes)  # the PyTorch reference
    steps += sum(len(reference_shapes) if n == REFERENCE else len(shapes) for n in builtins)
    steps += len(shapes) * len(options.extra_runners)
    padding_shapes = tuple(s for s in shapes if s.seq < target.max_seq)
    if options.padding_check and ORT_ALL in options.oracles:
        steps += len(padding_shapes)
    progress = Progress(options.progress, steps)
    load_s = time.perf_counter() - started

    # ---- the reference: PyTorch eager on every shape (also the inputs of the reference shapes)
    t0 = time.perf_counter()
    all_shapes = tuple(dict.fromkeys((*shapes, *reference_shapes)))
    feeds = {s: make_inputs(s, config.vocab_size, options.seed) for s in all_shapes}
    expected: dict[Shape, dict[str, np.ndarray]] = {}
    with TorchRunner(ckpt.model) as torch_runner:
        for shape in all_shapes:
            expected[shape] = torch_runner.infer(feeds[shape])
            if shape in shapes:
                progress.step(f"torch {shape}")
    reference_s = time.perf_counter() - t0

    def compare(got: dict, want: dict, valid: np.ndarray) -> Any:
        return compare_outputs(
            got, want, tolerances, valid=valid, checks=target.checks,
            gate_logits=want.get("gate_logits"), flip_tolerance=flip_tolerance,
            outputs=target.output_names,
        )

    oracles: dict[str, OracleResult] = {}
    notes: list[str] = []
    for name in builtins:
        runner = builtin_runner(name, onnx_path, options)
        run_shapes, note = shapes, ""
        if name == REFERENCE:
            run_shapes = reference_shapes
            note = (f"onnx.reference.ReferenceEvaluator is a slow pure-numpy implementation: "
                    f"run on {', '.join(map(str, reference_shapes))} only")
            notes.append(note)
        oracles[name] = run_oracle(runner, run_shapes, feeds, expected, compare, progress, note)
    for runner in options.extra_runners:
        oracles[runner.name] = run_oracle(runner, shapes, feeds, expected, compare, progress)

    # ---- padding invariance in onnxruntime
    padding, padding_s = None, 0.0
    if options.padding_check and ORT_ALL in options.oracles and oracles[ORT_ALL].results:
        t0 = time.perf_counter()
        try:
            with builtin_runner(ORT_ALL, onnx_path, options) as runner:
                padding = []
                for shape in padding_shapes:
                    padding += check_padding(
                        runner, (shape,), vocab_size=config.vocab_size, max_seq=target.max_seq,
                        tolerance=tolerance, checks=target.checks, seed=options.seed,
                    )
                    progress.step(f"padding {shape}")
        except AttnDeployError as exc:
            notes.append(f"padding check not run: {exc}")
            padding = None
        padding_s = time.perf_counter() - t0
    elif options.padding_check:
        notes.append(f"padding check not run: it needs the {ORT_ALL} oracle, which did not run")
    progress.finish()

    if target.dtype == "float16":
        notes.append(
            "fp16 graph compared with fp16 tolerances against the fp32 PyTorch model; "
            "onnxruntime's CPU provider runs nodes without an fp16 kernel in fp32 "
            "(InsertCastTransformer), so fp16 arithmetic itself needs a GPU provider to test"
        )
    if target.gated:
        notes.append(
            f"GA-Net gates are compared exactly on real tokens; a flip is accepted only where the "
            f"PyTorch gate logit has |s| < {flip_tolerance:g}, and that example is then left out "
            "of the logits comparison"
        )

    metadata = target.metadata
    model = {
        "onnx_path": str(onnx_path),
        "checkpoint": str(ckpt.path),
        "variant": metadata.get("variant"),
        "family": metadata.get("family"),
        "head": metadata.get("head"),
        "dtype": target.dtype,
        "opset": _int_or_none(metadata.get("opset")),
        "max_seq": target.max_seq,
        "inlined": metadata.get("inlined") == "true",
        "weights_sha256": metadata.get("weights_sha256"),
        "labels": list(ckpt.label_names),
    }
    timings = {
        "total_s": round(time.perf_counter() - started, 3),
        "load_s": round(load_s, 3),
        "reference_s": round(reference_s, 3),
        "padding_s": round(padding_s, 3),
        "oracles": {name: round(o.seconds, 3) for name, o in oracles.items()},
    }
    return ValidationReport(
        model=model,
        tolerance=tolerance,
        per_output=per_output,
        gate_flip_tolerance=flip_tolerance,
        shapes=[(s, s.lengths(options.seed)) for s in shapes],
        oracles=oracles,
        padding=padding,
        padding_runner=ORT_ALL,
        gated=target.gated,
        timings=timings,
        environment=environment(),
        notes=notes,
    )


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
