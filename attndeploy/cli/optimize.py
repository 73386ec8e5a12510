"""`attndeploy optimize`: any ONNX model -> onnxruntime's optimized form, checked equal and
faster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import ForceFlag, JsonFlag, choices, shared
from attndeploy.cli.output import console, print_json
from attndeploy.optimize_methods import DEFAULT_METHOD, METHODS

Method = choices("Method", METHODS)


def command(
    model: Annotated[Path, typer.Argument(help="An ONNX file: an attndeploy export, an "
                                               "export_model file or any other.")],
    out: Annotated[Path, shared("--out", "The optimized ONNX file.")],
    method: Annotated[
        Method,  # type: ignore[valid-type]
        shared("--method", "transformers: onnxruntime's transformer optimizer (what Optimum "
                           "runs); onnxruntime: onnxruntime's own optimized graph."),
    ] = Method(DEFAULT_METHOD),
    opt_level: Annotated[
        int | None,
        typer.Option(help="onnxruntime level first run: 0 none, 1 basic, 2 extended, 99 all "
                          "[transformers: 0; onnxruntime: 1].")
    ] = None,
    keep_slower: Annotated[
        bool,
        typer.Option("--keep-slower", help="Write the optimized model even when it is not "
                                           "faster on the shape grid (outputs still checked)."),
    ] = False,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Optimize for onnxruntime; write it only when its outputs are unchanged and it is faster
    on the shape grid (1x16 ... 32x128, one thread)."""
    import contextlib

    from rich.markup import escape

    from attndeploy.fsutil import check_not_an_input, check_output_file, check_replaceable
    from attndeploy.optimize import optimize_model

    check_output_file(out)
    check_not_an_input(out, [model])
    check_replaceable(out, force=force)
    status = (contextlib.nullcontext() if json_output
              else console.status(f"optimizing {model}", spinner="dots"))
    with status:
        result = optimize_model(model, out, method=method.value, opt_level=opt_level,
                                keep_slower=keep_slower)
    if json_output:
        print_json(result.to_json())
        return
    summary = result.to_json()
    fused = ", ".join(f"{n}x {op.split('::')[-1]}" for op, n in result.fused.items()) or "none"
    console.print(
        f"wrote [bold]{escape(str(result.path))}[/] ({method.value}, opt-level "
        f"{result.opt_level}): {summary['nodes_before']} -> {summary['nodes_after']} nodes"
        f"{', attndeploy functions inlined' if result.inlined else ''}; fused: {escape(fused)}",
        highlight=False,
    )
    worst = max((v for entry in result.parity for v in entry["max_abs"].values()), default=0.0)
    timing = result.timing
    shapes = ", ".join(f"{shape} {t['input']:.2f} -> {t['optimized']:.2f} ms"
                       for shape, t in timing["run_ms"].items())
    verdict = ("faster" if timing["faster"] else "NOT faster, written because of --keep-slower")
    console.print(
        f"same outputs on {len(result.parity)} feeds (max abs diff {worst:.3g}); CPU, one "
        f"thread: {shapes}; geometric mean {timing['geomean_ratio']:.3f}x ({verdict}); load "
        f"{timing['load_ms']['input']:.0f} -> {timing['load_ms']['optimized']:.0f} ms",
        highlight=False,
    )
