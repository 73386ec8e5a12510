"""`attndeploy infer`: one request to a served model, over gRPC or HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.defaults import parameter_default
from attndeploy.cli.options import JsonFlag, ProtocolOption, UrlOption, server_url, shared
from attndeploy.cli.output import console, print_json
from attndeploy.serving.client.infer import infer_request
from attndeploy.serving.client.protocol import Protocol
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY


def _positive(value: float) -> float:
    """--timeout must be > 0: a bad option (exit 2), as `TritonRunner` refuses it from Python."""
    if not value > 0:
        raise typer.BadParameter(f"{value:g} is not a timeout (> 0 seconds)")
    return value


def command(
    ctx: typer.Context,
    model: Annotated[str, shared("--model")],
    text: Annotated[str | None, shared("--text", "One, sent as it is to NAME_text.")] = None,
    ids: Annotated[str | None, typer.Option(help="Token ids, comma-separated.")] = None,
    image: Annotated[list[Path] | None, shared(
        "--image-file", "repeatable; sent as its bytes to NAME_image.")] = None,
    protocol: ProtocolOption = Protocol(parameter_default(infer_request, "protocol")),
    url: UrlOption = None,
    repo: Annotated[
        Path, shared("--repo", "The one holding the model (for vocabulary and labels).")
    ] = DEFAULT_REPOSITORY,
    timeout: Annotated[
        float, shared("--timeout", callback=_positive)
    ] = parameter_default(infer_request, "timeout_s"),
    json_output: JsonFlag = False,
    stream: Annotated[bool, typer.Option(
        "--stream", help="A generate model: print the text as its pieces arrive.")] = False,
    max_tokens: Annotated[int | None, shared(
        "--max-tokens", "the most [default: the served model's, 16].")] = None,
    temperature: Annotated[float | None, shared(
        "--temperature", "(a generate model's sampling) [default: greedy].")] = None,
    top_k: Annotated[int | None, shared("--top-k", "(a generate model)")] = None,
    top_p: Annotated[float | None, shared("--top-p", "(a generate model)")] = None,
    seed: Annotated[int | None, shared("--seed", "(a generate model's sampling)")] = None,
    stop: Annotated[str | None, shared("--stop", "(a generate model)")] = None,
) -> None:
    """Send one example; print the label and its probabilities (GA-Net: the tokens whose gates
    are open). --json prints the prediction contract's record (the fields of `predict --json`).
    A generate model (NAME_generate) takes --text and prints the generated text (--stream: as
    it arrives; --json: {text, token_ids, finish_reason}). An image model (NAME_image) takes
    --image-file files and prints label, probability and file per image (--json: the records of
    `predict --json`)."""
    from rich.markup import escape

    from attndeploy.errors import DataError

    if image:
        if text is not None or ids is not None:
            raise DataError("give --image-file files, or --text or --ids, not both")
        _images(server_url(ctx, url, protocol, repo), model, list(image), protocol, timeout,
                json_output)
        return

    if model.endswith("_generate"):
        _generate(server_url(ctx, url, protocol, repo), model, text, protocol, timeout,
                  json_output, stream, max_tokens, temperature, top_k, top_p, seed, stop)
        return

    id_list = None
    if ids is not None:
        try:
            id_list = [int(x) for x in ids.replace(" ", "").split(",") if x]
        except ValueError:
            raise DataError(f"--ids must be comma-separated integers, got {ids!r}") from None
    result = infer_request(url=server_url(ctx, url, protocol, repo), model=model, text=text,
                           ids=id_list, repo=repo if repo.is_dir() else None, timeout_s=timeout,
                           protocol=protocol)
    if json_output:
        print_json(result)
        return
    if "label" in result:
        console.print(f"[bold]{escape(str(result['label']))}[/]")
        for label, p in sorted(result["probabilities"].items(), key=lambda kv: -kv[1]):
            console.print(f"  {escape(label):>12}  {p:.4f}")
    else:
        console.print(escape(" ".join(f"{t}/{tag}" for t, tag in zip(
            result["tokens"], result["tags"], strict=True))))
    if "attended" in result:  # plain words, so a pipe or a log shows them too
        console.print(f"open gates ({len(result['attended'])}/{len(result['tokens'])}): "
                      f"{escape(' '.join(result['attended']))}")


def _images(url: str, model: str, images: list[Path], protocol: Protocol, timeout: float,
            json_output: bool) -> None:
    """Image files sent to an image model: a line of label, probability and file each, or the
    records as `predict --json` prints them."""
    from attndeploy.runtime.contract import CONTRACT_VERSION
    from attndeploy.serving.client.image import infer_images

    records = infer_images(url=url, model=model, images=images, timeout_s=timeout,
                           protocol=protocol)
    if json_output:
        print_json({"model": model, "contract_version": CONTRACT_VERSION,
                    "predictions": records})
        return
    for record in records:
        probability = record["probabilities"][record["label"]]
        console.print(f"{record['label']}\t{probability:.4f}\t{record['image']}",
                      highlight=False, markup=False)


def _generate(url: str, model: str, text: str | None, protocol: Protocol, timeout: float,
              json_output: bool, stream: bool, max_tokens: int | None,
              temperature: float | None, top_k: int | None, top_p: float | None,
              seed: int | None, stop: str | None) -> None:
    """One generation from a generate model, printed as it arrives with --stream."""
    import sys

    from attndeploy.errors import DataError
    from attndeploy.serving.client.generate import GenerateParams, generate

    if text is None:
        raise DataError(f"{model} is a generate model: give the prompt with --text")
    params = GenerateParams(max_tokens, temperature, top_k, top_p, seed, stop)

    def show(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    result = generate(url, model, text, params, protocol=protocol, stream=stream,
                      on_piece=show if stream and not json_output else None, timeout_s=timeout)
    if json_output:
        print_json(result.to_dict())
    elif stream:
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.text + "\n")
