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
    protocol: ProtocolOption = Protocol(parameter_default(infer_request, "protocol")),
    url: UrlOption = None,
    repo: Annotated[
        Path, shared("--repo", "The one holding the model (for vocabulary and labels).")
    ] = DEFAULT_REPOSITORY,
    timeout: Annotated[
        float, shared("--timeout", callback=_positive)
    ] = parameter_default(infer_request, "timeout_s"),
    json_output: JsonFlag = False,
) -> None:
    """Send one example; print the label and its probabilities (GA-Net: the tokens whose gates
    are open). --json prints the prediction contract's record (the fields of `predict --json`)."""
    from rich.markup import escape

    from attndeploy.errors import DataError

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
