"""The command line's vocabulary: every option name one meaning, every shared option defined here.

`MEANINGS` gives each option name that more than one command takes (and a few that one command
takes but others might) its one meaning, the first words of its help in every command;
`shared(NAME, detail)` builds that option, the command's own detail after the meaning.
`tests/cli/test_vocabulary.py` walks the command tree and fails on a name used with two meanings
(a help that does not start with the name's meaning, a flag in one command and a value in
another) and on a default typed in `cli/` instead of read from the library. Old spellings live
in `deprecated.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.config import FAMILIES
from attndeploy.errors import ServerError
from attndeploy.families.registry import architecture_names, family_names
from attndeploy.serving.client.protocol import DEFAULT_URLS, Protocol, server_address
from attndeploy.variants.registry import variant_names

# option name -> its one meaning: the first words of its help wherever it is used
MEANINGS: dict[str, str] = {
    "--model": "A served model's name (an id model or NAME_text).",
    "--factory": "Your own model instead of a checkpoint, as MODULE:FACTORY:",
    "--weights": "safetensors state dict loaded strictly into --factory's module.",
    "--repo": "Model repository folder.",
    "--text": "A text to classify.",
    "--image-file": "An image file (PNG or JPEG) for an image model;",
    "--text-file": "Texts, one per line (a file, a pipe, or '-' for stdin).",
    "--dataset": "A built-in data set (sparse_evidence, tagging).",
    "--data": ("Labelled texts: a JSONL file (or a pipe) whose lines the model's family reads "
               "({\"text\", \"label\"} for text classification)."),
    "--json": "Print the result as one JSON document on stdout.",
    "--jsonl": "Print one JSON object per line (JSON lines) on stdout.",
    "--json-out": "Write the JSON report to this file.",
    "--plot": "Write a PNG picture to this file.",
    "--force": "Replace an existing output (without it an existing output is refused).",
    "--out": "Where the result is written.",
    "--seed": "Random seed.",
    "--shapes": "Shapes BATCHxSEQ, comma-separated.",
    "--atol": "Absolute tolerance.",
    "--rtol": "Relative tolerance.",
    "--providers": "onnxruntime execution providers, comma-separated.",
    "--threads": "onnxruntime intra-op threads.",
    "--temperature": "The temperature the logits are divided by",
    "--truncate": "Keep the first max-seq tokens of a longer text instead of refusing it.",
    "--batch-size": "Examples per batch.",
    "--max-seq": "The longest sequence (tokens) the model takes.",
    "--steps": "The most optimizer steps.",
    "--concurrency": "Concurrency levels, comma-separated (closed loop).",
    "--seq": "Sequence length, or a mix: 16,32,64 (tokens, or words of a text model's random "
             "texts).",
    "--window": "Measurement window (s).",
    "--protocol": "gRPC or HTTP (KServe v2).",
    "--url": "Server address host:port (a host alone gets the protocol's port).",
    "--timeout": "Seconds to wait for the server's answer.",
    "--state-file": "State file of `serve --background`.",
    "--method": "How the command does its work, one of its choices.",
    "--variant": "Attention variant.",
    "--hf-model": "A Hugging Face model from local files (nothing is downloaded):",
    "--max-new-tokens": "The most tokens a generation adds.",
    "--max-tokens": "A generate model's new tokens per request:",
    "--top-k": "Sample among the k likeliest tokens.",
    "--top-p": "Sample among the likeliest tokens whose probabilities reach p.",
    "--stop": "End a generated text before this text.",
    "--requests": "A generate model's requests per level.",
}


# One range per shared numeric option, wherever it is used: a value outside it is a usage error
# (exit 2) before any work, never a check later in one command and not in another.
RANGES: dict[str, dict[str, int]] = {
    "--threads": {"min": 1, "max": 1024},
    "--batch-size": {"min": 1, "max": 65536},
}


def shared(name: str, detail: str = "", **kwargs: Any) -> Any:
    """The option `name` with its one meaning as the start of its help, `detail` after it, and
    its one range (`RANGES`) where it has one."""
    help_text = MEANINGS[name] + (f" {detail}" if detail else "")
    return typer.Option(name, help=help_text, **{**RANGES.get(name, {}), **kwargs})


def readable_text_file(value: Path | None) -> Path | None:
    """The callback of an option that names a file of texts read more than once (or by a
    library that wants a file): a pipe (`--data <(...)`) or '-' (stdin) is read once, now, into
    a temporary file named after it, removed when the command ends; a regular file (or a path
    that is not there, for the command's own message) is returned as it is."""
    import atexit
    import shutil
    import stat
    import sys
    import tempfile

    if value is None:
        return None
    path = Path(value)
    if str(path) == "-":
        if sys.stdin is None:
            raise typer.BadParameter("stdin is closed: pipe the texts in")
        source, name = sys.stdin.buffer, "stdin"
    else:
        try:
            mode = path.stat().st_mode
        except OSError:
            return path
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            return path
        source, name = open(path, "rb"), path.name  # noqa: SIM115  (closed below)
    folder = Path(tempfile.mkdtemp(prefix="attndeploy-texts."))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    spooled = folder / name
    try:
        with spooled.open("wb") as out:
            shutil.copyfileobj(source, out)
    finally:
        if source is not getattr(sys.stdin, "buffer", None):
            source.close()
    return spooled


def choices(name: str, values: Iterable[str]) -> type[Enum]:
    """An option's choices as Typer takes them (a str Enum), from the library's own tuple."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


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


# Choices of train's options, the library's tuples (never typed again here); a variant's own
# come from its spec (`TrainOption.choices`, cli/args/variants.py)
# `--architecture`: the encoder (ModelConfig.family, the key checkpoints keep); `Family` is its
# old name, from when `--family` named it (a model family is now the kind of model,
# `attndeploy.families`: `--model-family`)
# `--architecture` lists every family's (`FamilySpec.architectures`); a model family refuses
# another's in one line (`ModelConfig`, the image family's config)
Architecture = choices("Architecture", tuple(dict.fromkeys((*FAMILIES, *architecture_names()))))
Family = Architecture
# `--model-family`: the registered model families (`attndeploy.families`), in their order
ModelFamily = choices("ModelFamily", family_names())


CheckpointArg = Annotated[
    Path, typer.Argument(help="Checkpoint directory (config.json + model.safetensors).")
]
JsonFlag = Annotated[bool, shared("--json")]
JsonOutOption = Annotated[Path | None, shared("--json-out")]
PlotOption = Annotated[Path | None, shared("--plot")]
ForceFlag = Annotated[bool, shared("--force")]
SeedOption = Annotated[int, shared("--seed", "(data, init, noise)")]
RepoOption = Annotated[Path, shared("--repo")]
ProtocolOption = Annotated[Protocol, shared("--protocol")]
UrlOption = Annotated[str | None, shared(
    "--url", "[default: the address `attndeploy serve --background` recorded for --repo while "
             f"that server runs, else {DEFAULT_URLS[Protocol.GRPC]} for grpc, "
             f"{DEFAULT_URLS[Protocol.HTTP]} for http].")]
StateFileOption = Annotated[Path | None, shared(
    "--state-file", "[default: REPO/.attndeploy-server.json].")]
AtolOption = Annotated[float | None, shared("--atol", "[default: by dtype]")]
RtolOption = Annotated[float | None, shared("--rtol", "[default: by dtype]")]
ProvidersOption = Annotated[str | None, shared("--providers")]
FactoryOption = Annotated[str | None, shared(
    "--factory", "FACTORY() (imported with the current folder on sys.path) returns (module, "
                 "inputs) or (module, inputs, dynamic_shapes): inputs a dict name -> example "
                 "tensor, dynamic_shapes {name: {axis: dim name}}, e.g. {'x': {0: 'batch', 1: "
                 "'seq'}}.", metavar="MODULE:FACTORY")]
WeightsOption = Annotated[Path | None, shared("--weights")]


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
