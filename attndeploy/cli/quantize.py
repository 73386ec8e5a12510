"""`attndeploy quantize`: an exported model -> int8, checked against fp32 before it is written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import ForceFlag, JsonFlag, choices, readable_text_file, shared
from attndeploy.cli.output import console, print_json
from attndeploy.quantize.options import (
    ACTIVATIONS,
    DEFAULT_ACTIVATIONS,
    DEFAULT_BATCH_GRID,
    DEFAULT_GRID,
    METHODS,
)

Method = choices("Method", METHODS)
Activations = choices("Activations", ACTIVATIONS)


def _default(name: str):
    from attndeploy.quantize.options import QuantizeOptions

    return field_default(QuantizeOptions, name)


def command(
    model: Annotated[Path, typer.Argument(help="ONNX file exported by attndeploy.")],
    out: Annotated[Path, shared("--out", "The int8 ONNX file.")],
    data: Annotated[
        Path | None,
        shared("--data", "E.g. the held-out split, read as the model's family reads it: "
                         "label agreement and accuracy of int8 against fp32 for a text "
                         "classifier ({\"text\"} lines and tag agreement for a tagger; an "
                         "image model reads an image folder, its test/ part if it has one); "
                         "static quantization calibrates on them.",
               callback=readable_text_file),
    ] = None,
    method: Annotated[
        Method,  # type: ignore[valid-type]
        shared("--method", "dynamic: activations quantized at run time; static: QDQ "
                           "calibrated on --data; best: both, the more accurate.")
    ] = Method(_default("method")),
    per_channel: Annotated[
        bool, typer.Option("--per-channel/--per-tensor", help="Weight scales per output "
                                                              "channel or per tensor.")
    ] = _default("per_channel"),
    reduce_range: Annotated[
        bool, typer.Option("--reduce-range/--full-range", help="Weights in 7 bits instead of 8 "
                                                               "(onnxruntime's reduce_range): on "
                                                               "CPUs without VNNI it can keep "
                                                               "more labels.")
    ] = _default("reduce_range"),
    exclude: Annotated[
        list[str] | None,
        typer.Option(help="A MatMul/Gemm node kept in fp32 (repeatable; `attndeploy debug "
                          "compare` ranks the layers int8 hurts most).")
    ] = None,
    exclude_worst: Annotated[
        int, typer.Option(min=0, help="Keep the N layers int8 hurts most in fp32: rank them "
                                      "(attndeploy debug compare on the shape grid), then "
                                      "quantize again without their MatMuls.")
    ] = _default("exclude_worst"),
    gate_network_fp32: Annotated[
        bool, typer.Option("--gate-network-fp32/--gate-network-int8",
                           help="Gated variants (GA-Net, a plug-in's): keep the gate "
                                "network in fp32, so the hard gates decide as in fp32 (int8 "
                                "can flip those nearest the threshold).")
    ] = _default("gate_network_fp32"),
    activations: Annotated[
        Activations | None,  # type: ignore[valid-type]
        typer.Option(help="dynamic: per-row, one activation scale per token (the same answer "
                          "alone or in any batch, more labels kept); per-batch, one per batch "
                          "(onnxruntime's fused kernel, 1.1-1.6x faster in-process; a text's "
                          "answer moves with the texts batched with it).",
                     show_default=DEFAULT_ACTIVATIONS)
    ] = _default("activations"),
    max_logit_change: Annotated[
        float, typer.Option(help="Tolerance: the largest |logit change| on the shape grid.")
    ] = _default("max_logit_change"),
    min_agreement: Annotated[
        float, typer.Option(help="Tolerance with --data: the share of texts whose label stays.")
    ] = _default("min_agreement"),
    max_accuracy_drop: Annotated[
        float, typer.Option(help="Tolerance with --data: held-out accuracy int8 may lose.")
    ] = _default("max_accuracy_drop"),
    shapes: Annotated[
        str | None, shared("--shapes", f"Compared on random ids [default: {DEFAULT_GRID}, seq "
                                       "capped at the model's max_seq]; an image model on "
                                       "random images, its shapes batch sizes [default: "
                                       f"{','.join(map(str, DEFAULT_BATCH_GRID))}].")
    ] = None,
    prompts: Annotated[
        int, typer.Option(min=1, help="Decoders: greedy agreement over this many prompts "
                                      "(--data texts' first tokens, else random token ids).")
    ] = _default("prompts"),
    new_tokens: Annotated[
        int, typer.Option(min=1, help="Decoders: new tokens per prompt.")
    ] = _default("new_tokens"),
    prompt_tokens: Annotated[
        int, typer.Option(min=1, help="Decoders: a prompt's length at most.")
    ] = _default("prompt_tokens"),
    max_perplexity_increase: Annotated[
        float, typer.Option(help="Tolerance for decoders, with --data: the relative perplexity "
                                 "increase int8 may add (0.05 = 5 %).")
    ] = _default("max_perplexity_increase"),
    min_token_agreement: Annotated[
        float, typer.Option(help="Tolerance for decoders: the share of greedy tokens equal to "
                                 "fp32's up to each prompt's first divergence (0: reported "
                                 "only).")
    ] = _default("min_token_agreement"),
    threads: Annotated[int | None, shared("--threads", "For the checks.")] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Quantize to int8 (onnxruntime.quantization; the attndeploy nodes keep their functions and
    the metadata is kept, so predict, package and serve take it), compare with fp32, and write
    the file only within the tolerances (else exit 1, nothing written). A decoder
    (text-generation export) is judged by greedy-token agreement and, with --data, perplexity."""
    import contextlib

    from rich.markup import escape

    from attndeploy.quantize import QuantizeOptions, quantize_model

    options = QuantizeOptions(
        method=method.value, per_channel=per_channel, reduce_range=reduce_range,
        exclude=tuple(exclude or ()),
        exclude_worst=exclude_worst, gate_network_fp32=gate_network_fp32,
        activations=activations.value if activations else None,
        grid=shapes, max_logit_change=max_logit_change, min_agreement=min_agreement,
        max_accuracy_drop=max_accuracy_drop, threads=threads, force=force,
        prompts=prompts, new_tokens=new_tokens, prompt_tokens=prompt_tokens,
        max_perplexity_increase=max_perplexity_increase,
        min_token_agreement=min_token_agreement)
    status = (contextlib.nullcontext() if json_output
              else console.status(f"quantizing {model}", spinner="dots"))
    with status:
        result = quantize_model(model, out, options, data=data)
    if json_output:
        print_json(result.to_dict())
    elif result.to_dict().get("family") == "text-generation":
        _print_decoder(result)
    else:
        for candidate in result.candidates:
            grid_check, data_check = candidate.grid, candidate.data
            how = (f"dynamic, {options.dynamic_activations} activations"
                   if candidate.method == "dynamic" else candidate.method)
            line = (f"{how}: {candidate.quantized_nodes} MatMuls in int8, "
                    f"{candidate.size_bytes / 2**20:.1f} MiB (fp32 "
                    f"{result.source_bytes / 2**20:.1f}); grid: largest logit change "
                    f"{grid_check.max_logit_change:.3g}")
            agreed = _agreement(grid_check.agreement, grid_check.label_agreement, ".1%")
            line += f", {agreed}" if agreed else ""
            if grid_check.gate_flips is not None:
                line += f", hard gates flipped {grid_check.gate_flips}"
            if candidate.gate_network:
                line += f"; gate network in fp32 ({len(candidate.gate_network)} MatMuls)"
            if candidate.ranking:
                worst = ", ".join(r["label"] for r in candidate.ranking[:exclude_worst])
                line += (f"; kept in fp32: {len(candidate.worst)} MatMuls of the worst "
                         f"layer(s) {worst}")
            if data_check is not None:
                said = [_agreement(data_check.agreement, data_check.label_agreement, ".2%")]
                if data_check.accuracy_drop is not None:
                    said.append(f"{data_check.score} {data_check.fp32_accuracy:.4f} -> "
                                f"{data_check.int8_accuracy:.4f}")
                line += (f"; {data_check.texts} {data_check.unit}: "
                         f"{', '.join(s for s in said if s)}")
                if data_check.gate_flips is not None:
                    line += (f", hard gates flipped {data_check.gate_flips} of "
                             f"{data_check.gates}")
            mark = "[green]within the tolerances[/]" if candidate.passed else (
                "[red]" + escape("; ".join(candidate.failures)) + "[/]")
            console.print(f"{escape(line)}: {mark}", highlight=False)
        if result.chosen is not None:
            console.print(f"wrote [bold]{escape(str(result.out))}[/] ({result.chosen.method})",
                          highlight=False)
    result.raise_for_failure()


def _print_decoder(result) -> None:
    """One line per candidate: greedy agreement, perplexity, and the verdict."""
    from rich.markup import escape

    for candidate in result.candidates:
        greedy, ppl = candidate.greedy, candidate.perplexity
        line = (f"dynamic, {result.options.dynamic_activations} activations: "
                f"{candidate.quantized_nodes} MatMuls in int8, "
                f"{candidate.size_bytes / 2**20:.1f} MiB (fp32 "
                f"{result.source_bytes / 2**20:.1f}); greedy over {greedy.prompts} "
                f"{greedy.source} prompts x {greedy.new_tokens} tokens: equal up to the first "
                f"divergence {greedy.prefix_agreement:.1%}, overall {greedy.token_agreement:.1%}, "
                f"{greedy.identical_prompts}/{greedy.prompts} prompts identical; prefill logit "
                f"change {greedy.max_prefill_logit_change:.3g}")
        if ppl is not None:
            line += (f"; perplexity on {ppl.texts} texts ({ppl.tokens} tokens) "
                     f"{ppl.fp32_perplexity:.4g} -> {ppl.int8_perplexity:.4g} "
                     f"({ppl.relative_change:+.2%}), next token equal "
                     f"{ppl.next_token_agreement:.2%}")
        mark = "[green]within the tolerances[/]" if candidate.passed else (
            "[red]" + escape("; ".join(candidate.failures)) + "[/]")
        console.print(f"{escape(line)}: {mark}", highlight=False)
    if result.chosen is not None:
        console.print(f"wrote [bold]{escape(str(result.out))}[/] (dynamic)", highlight=False)


def _agreement(name: str, value: float | None, form: str) -> str:
    """"labels equal 99.2%" (the family's decision statistic, e.g. `tag agreement 99.2%`); ""
    when the family compares no decision."""
    if value is None:
        return ""
    return f"{'labels equal' if name == 'label agreement' else name} {value:{form}}"
