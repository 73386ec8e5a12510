"""What in-process inference needs from an exported model's `metadata_props`, parsed from a dict.

`attndeploy export` records (docs/ops.md, "Model-level interface"; exporter `build_metadata`):
`attndeploy.variant`, `attndeploy.version`, `attndeploy.config` (the JSON model config),
`attndeploy.weights_sha256`, `attndeploy.labels` (JSON list of label names), `attndeploy.max_seq`
(the export's limit, at most the config's) and `attndeploy.tokenizer` (the tokenizer record as
JSON, `{"type": "word" | "wordpiece", ...}`, or "" when the checkpoint had none). A file without
the required keys was not made by attndeploy. The record's type picks the class that reads it
(`runtime.shipping.tokenizer_from_record`, by the table served text models use too).

The input is a plain `{key: value}` mapping, so no ONNX parser is needed: `InferenceModel` hands
in onnxruntime's `get_modelmeta().custom_metadata_map`, `attndeploy infer` the metadata_props
that `onnx` reads; with them come the graph's output names, from which (a `gates` output)
whether the model is gated is read. This is the one reader of those facts: the packager's
`serving.packaging.onnx_info.read_model_info` calls it, and its `ModelInfo` is a `ModelMetadata`.
The keys are `runtime.names`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from attndeploy.echo import echo
from attndeploy.errors import DataError, ModelError
from attndeploy.families.registry import FamilySpec, family_for_head, heads
from attndeploy.jsonread import parse_json
from attndeploy.runtime.families import runtime_part
from attndeploy.runtime.names import (
    GATES,
    META_CONFIG,
    META_LABELS,
    META_MAX_SEQ,
    META_TOKENIZER,
    META_VARIANT,
    META_VERSION,
    META_WEIGHTS,
    TAG_IDS,
)
from attndeploy.runtime.shipping import tokenizer_from_record
from attndeploy.runtime.tokenizer import TextTokenizer

REQUIRED = (META_VARIANT, META_VERSION, META_CONFIG, META_WEIGHTS, META_LABELS)
REQUIRED_CONFIG_KEYS = ("variant", "head", "num_labels", "max_seq", "vocab_size")


def __getattr__(name: str) -> Any:
    """`HEADS`, the valid heads: every registered family's (`families.registry.heads()`)."""
    if name == "HEADS":
        return heads()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ModelMetadata:
    """The facts of one exported model that tokenizing, running and decoding depend on."""

    variant: str
    head: str  # its family's key (`FamilySpec.head`): "classification", "tagging", ...
    labels: tuple[str, ...]
    max_seq: int  # the longest sequence the export takes
    vocab_size: int
    tokenizer: TextTokenizer | None  # None: the checkpoint had no vocabulary (ids only)
    exporter_version: str
    weights_sha256: str
    config: dict[str, Any]
    outputs: tuple[str, ...] = ()  # the graph's output names

    @property
    def gated(self) -> bool:
        """Whether the model outputs `gates` (a gated variant's, e.g. GA-Net's): read from the
        graph, so any registered gated variant is one, with no list of names."""
        return GATES in self.outputs

    @property
    def decodes_tags(self) -> bool:
        """Whether the model outputs `tag_ids` (a CRF tagger's Viterbi path, which its tags
        are): read from the graph, like `gated`."""
        return TAG_IDS in self.outputs

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @property
    def family(self) -> FamilySpec:
        """The model's family (the registered one whose head the config names)."""
        return family_for_head(self.head)

    @property
    def runtime(self) -> ModuleType:
        """The family's runtime part: how the model's outputs decode (`runtime.families`)."""
        return runtime_part(self.family)

    @property
    def tagging(self) -> bool:
        """Whether the logits are per token ([B, T, C]); the name it had before families."""
        return self.runtime.LOGITS_RANK == 3


def _positive_int(value: Any, what: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{source}: {what} must be a positive integer, got "
                         f"{echo(repr(value))}; re-export the model.")
    return value


def _json(meta: Mapping[str, str], key: str, source: str) -> Any:
    return parse_json(meta[key], f"{source}: attndeploy metadata {key}", error=ModelError,
                      invalid=lambda exc: f"{source}: corrupt attndeploy metadata {key} ({exc}).")


def _not_a_checkpoint_export(meta: Mapping[str, str], missing: list[str], source: str) -> str:
    """Why `source` cannot be read as a checkpoint's export, and what to do, on one line. A
    generic model (`export_model`, `attndeploy export --factory`: the exporter's version and none
    of a checkpoint's keys) is told apart from a file attndeploy did not write."""
    lacks = f"its metadata lacks {', '.join(missing)}"
    if META_VERSION in meta and len(missing) == len(REQUIRED) - 1:
        what = (f"{source} is an export of your own model (`export_model` or `attndeploy export "
                f"--factory`), not of a checkpoint: {lacks}, which only a checkpoint records")
    else:
        what = f"{source} was not exported by attndeploy: {lacks}"
    return (f"{what}. Export a checkpoint with `attndeploy export CHECKPOINT --out model.onnx`; "
            f"check a model of your own with `attndeploy validate --factory MODULE:FACTORY "
            f"{source}` and run it with onnxruntime directly.")


def parse_metadata(meta: Mapping[str, str], source: str = "the model", *,
                   outputs: Sequence[str], read_tokenizer: bool = True) -> ModelMetadata:
    """The `ModelMetadata` in an exported model's metadata_props; ModelError naming what is
    missing or wrong (`source` names the file in the message). The one reader of that metadata:
    the packager's `read_model_info` calls it with `read_tokenizer=False` (a text model checks
    its tokenizer record itself), leaving `tokenizer` None. `outputs` are the graph's output
    names: whether the model is gated is read from them (a `gates` output), never from its
    variant's name, so a plug-in gated variant is one like GA-Net."""
    missing = [key for key in REQUIRED if key not in meta]
    if missing:
        raise ModelError(_not_a_checkpoint_export(meta, missing, source))
    config = _json(meta, META_CONFIG, source)
    labels = _json(meta, META_LABELS, source)
    if not isinstance(config, dict):
        raise ModelError(f"{source}: {META_CONFIG} must be a JSON object.")
    missing = [key for key in REQUIRED_CONFIG_KEYS if key not in config]
    if missing:
        raise ModelError(f"{source}: the model config in {META_CONFIG} lacks "
                          f"{', '.join(missing)}; re-export the model with this attndeploy.")
    num_labels = _positive_int(config["num_labels"], "num_labels", source)
    if not (isinstance(labels, list) and all(isinstance(x, str) for x in labels)):
        raise ModelError(f"{source}: {META_LABELS} must be a JSON list of strings.")
    if len(labels) != num_labels:
        raise ModelError(
            f"{source}: {len(labels)} label names in {META_LABELS} but num_labels = {num_labels}."
        )
    if config["head"] not in heads():
        raise ModelError(f"{source}: unknown head {echo(repr(config['head']))} in the model "
                         f"config; this attndeploy knows {', '.join(heads())}.")
    if config["variant"] != meta[META_VARIANT]:
        raise ModelError(f"{source}: {META_VARIANT} = {echo(repr(meta[META_VARIANT]))} but the "
                         f"model config says {echo(repr(config['variant']))}.")
    config_max_seq = _positive_int(config["max_seq"], "the config's max_seq", source)
    max_seq = config_max_seq
    raw_max_seq = meta.get(META_MAX_SEQ)
    if raw_max_seq is not None:  # export --max-seq may lower it
        if not raw_max_seq.isdigit() or not 1 <= int(raw_max_seq) <= config_max_seq:
            raise ModelError(f"{source}: {META_MAX_SEQ} = {echo(repr(raw_max_seq))} must be an "
                             f"integer in [1, {config_max_seq}] (the config's max_seq); re-export.")
        max_seq = int(raw_max_seq)
    vocab_size = _positive_int(config["vocab_size"], "the config's vocab_size", source)
    tokenizer = None
    if read_tokenizer and meta.get(META_TOKENIZER):
        try:
            tokenizer = tokenizer_from_record(_json(meta, META_TOKENIZER, source))
        except DataError as exc:
            raise ModelError(f"{source}: {META_TOKENIZER}: {exc}") from exc
        if len(tokenizer) > vocab_size:
            raise ModelError(f"{source}: the vocabulary has {len(tokenizer)} tokens but the "
                              f"model embeds {vocab_size}; re-export the model.")
    return ModelMetadata(
        variant=str(config["variant"]),
        head=str(config["head"]),
        labels=tuple(labels),
        max_seq=max_seq,
        vocab_size=vocab_size,
        tokenizer=tokenizer,
        exporter_version=meta[META_VERSION],
        weights_sha256=meta[META_WEIGHTS],
        config=config,
        outputs=tuple(outputs),
    )
