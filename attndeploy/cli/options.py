"""Option aliases and choices shared by the commands."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.errors import ServerError
from attndeploy.serving.client.protocol import DEFAULT_URLS, Protocol, server_address
from attndeploy.variants.registry import variant_names

# The registered variants (`attndeploy.variants.registry`), in their order.
Variant = Enum("Variant", {name: name for name in variant_names()}, type=str)


def variant_name(value: Any) -> str:
    """`--variant`'s parser: the name of a registered variant, else a bad option (exit 2) that
    lists them (the registry's wording, not Click's "is not one of")."""
    name = value.value if isinstance(value, Enum) else str(value)
    names = [variant.value for variant in Variant]
    if name not in names:
        raise typer.BadParameter(f"unknown variant {name!r}; valid: {', '.join(names)}")
    return name


# A name rather than the Enum: Typer's choice check would answer first, in Click's words. The
# choices still show in --help (the metavar).
VariantOption = Annotated[str, typer.Option(
    parser=variant_name, metavar="[" + "|".join(variant.value for variant in Variant) + "]",
    help="Attention variant.")]


class Family(str, Enum):
    transformer = "transformer"
    bilstm = "bilstm"


class QVIForm(str, Enum):
    pooled = "pooled"
    pairwise = "pairwise"


class AuxNetwork(str, Enum):
    mlp = "mlp"
    conv = "conv"
    bilstm = "bilstm"


class GateMode(str, Enum):
    threshold = "threshold"
    sample = "sample"


class GateRelaxation(str, Enum):
    concrete = "concrete"
    hard_concrete = "hard_concrete"


CheckpointArg = Annotated[
    Path, typer.Argument(help="Checkpoint directory (config.json + model.safetensors).")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ForceFlag = Annotated[bool, typer.Option("--force", help="Replace an existing output.")]
SeedOption = Annotated[int, typer.Option("--seed", help="Random seed (data, init, noise).")]


def server_url(ctx: typer.Context, url: str | None, protocol: Protocol, repo: Path) -> str:
    """The server address a client command dials: `--url` with the protocol's default port
    added to a host alone (a scheme, a path or a bad port is a bad option, exit 2); without
    `--url`, the address `attndeploy serve --background` recorded for `repo` if that server
    still runs, else the protocol's loopback default."""
    from attndeploy.serving.server.background import recorded_url

    if url is None:
        return recorded_url(repo, protocol) or DEFAULT_URLS[protocol]
    try:
        return server_address(url, protocol)
    except ServerError as exc:
        raise typer.BadParameter(str(exc), ctx=ctx, param_hint="'--url'") from None
