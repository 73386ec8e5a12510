"""`attndeploy generate`: continue a prompt with an exported decoder, in process (numpy +
onnxruntime, no torch; issue #49). Greedy unless sampling is asked for; the new text streams to
stdout as tokens come; `--json` prints one document instead (`text`, `token_ids`); with
`--prompt-file` every non-blank line is a prompt, all batched with left padding.

An exported translation model (a folder with encoder_model.onnx and decoder_model.onnx,
issue #51) translates each prompt instead: greedy, or beam search with `--num-beams N`
(`--length-penalty`), `attndeploy.generation.seq2seq_onnx`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.defaults import parameter_default
from attndeploy.cli.options import JsonFlag, shared
from attndeploy.cli.output import print_json
from attndeploy.generation.loop import DEFAULT_MAX_NEW_TOKENS
from attndeploy.generation.seq2seq_onnx import OnnxSeq2Seq


def command(
    model: Annotated[Path, typer.Argument(help="An exported decoder (attndeploy export).")],
    prompt: Annotated[str | None, typer.Option(help="The text to continue.")] = None,
    prompt_file: Annotated[Path | None, typer.Option(
        help="A file of prompts, one a line, generated as one left-padded batch.")] = None,
    max_new_tokens: Annotated[int, shared("--max-new-tokens")] = DEFAULT_MAX_NEW_TOKENS,
    temperature: Annotated[float | None, shared(
        "--temperature", "when sampling (0: greedy) [default: greedy; 1 when only top-k, "
                         "top-p or a seed is given].")] = None,
    top_k: Annotated[int | None, shared("--top-k")] = None,
    top_p: Annotated[float | None, shared("--top-p")] = None,
    seed: Annotated[int | None, shared("--seed", "(sampling)")] = None,
    stop: Annotated[str | None, shared("--stop")] = None,
    threads: Annotated[int | None, shared("--threads", "[default: onnxruntime's]")] = None,
    num_beams: Annotated[int, typer.Option(
        help="Beam search with this many beams (a translation model; 1: greedy).")
    ] = parameter_default(OnnxSeq2Seq.translate, "num_beams"),
    length_penalty: Annotated[float, typer.Option(
        help="Beam search: a hypothesis scores log-probability / length ** this.")
    ] = parameter_default(OnnxSeq2Seq.translate, "length_penalty"),
    json_output: JsonFlag = False,
) -> None:
    """Continue a prompt (or each line of --prompt-file) with an exported decoder."""
    from attndeploy.errors import DataError
    from attndeploy.generation.loop import DecoderModel

    if (prompt is None) == (prompt_file is None):
        raise DataError("give one of --prompt TEXT or --prompt-file FILE")
    if prompt_file is not None:
        try:
            prompts = [line for line in prompt_file.read_text(encoding="utf-8").splitlines()
                       if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{prompt_file}: cannot read it ({exc})") from None
        if not prompts:
            raise DataError(f"{prompt_file}: no prompts (every line is blank)")
    else:
        prompts = [prompt]
    if num_beams < 1:
        raise DataError(f"--num-beams must be at least 1, got {num_beams}")
    from attndeploy.generation.seq2seq_onnx import is_translation_export

    if is_translation_export(model):
        _translate(model, prompts, num_beams, length_penalty, max_new_tokens, threads,
                   json_output, single=prompt is not None)
        return
    if num_beams != 1:
        raise DataError("--num-beams applies to a translation model (an export folder)")
    decoder = DecoderModel(model, threads=threads)
    stream = not json_output and len(prompts) == 1

    def on_text(row: int, piece: str) -> None:
        typer.echo(piece, nl=False)

    results = decoder.generate(prompts, max_new_tokens, temperature=temperature, top_k=top_k,
                               top_p=top_p, seed=seed, stop=stop,
                               on_text=on_text if stream else None)
    if json_output:
        documents = [r.to_dict() for r in results]
        print_json(documents[0] if prompt is not None else {"generations": documents})
    elif stream:
        typer.echo()
    else:
        for text, result in zip(prompts, results, strict=True):
            typer.echo(f"{text}{result.text}")


def _translate(folder: Path, sources: list[str], num_beams: int, length_penalty: float,
               max_new_tokens: int, threads: int | None, json_output: bool, *,
               single: bool) -> None:
    """Each source's translation: one line each, or JSON (`text`, `token_ids`, `score`)."""
    from attndeploy.generation.seq2seq_onnx import OnnxSeq2Seq

    model = OnnxSeq2Seq(folder, threads=threads)
    results = model.translate(sources, num_beams=num_beams, length_penalty=length_penalty,
                              max_new_tokens=max_new_tokens)
    if json_output:
        documents = [{"source": source, "text": text, "token_ids": result.ids,
                      "score": result.score, "num_beams": num_beams}
                     for source, (text, result) in zip(sources, results, strict=True)]
        print_json(documents[0] if single else {"translations": documents})
        return
    for text, _ in results:
        typer.echo(text)
