"""Converted Hugging Face models as attndeploy checkpoints: the model, save and read.

A checkpoint is the usual directory (`config.json` + `model.safetensors`, docs/architecture.md), so
`attndeploy info`, `export`, `validate`, `package` and `serve` take it as they take a built-in
one: `attndeploy.checkpoint.read_checkpoint` hands a config with an `"hf"` section to
`read_hf_checkpoint` (here, at the checkpoint layer), and `export_checkpoint`
(`attndeploy.export.exporter`) to `export_hf_checkpoint` (`attndeploy.integrations.hf_export`,
at the export layer).

config.json (format "attndeploy-checkpoint", format_version 1), beside the usual keys:
  hf          {"architecture": "BertForSequenceClassification" (a class `convert` supports),
               "model_type": "bert" | "roberta" | "distilbert",
               "config": the transformers config (`PretrainedConfig.to_dict()`),
               "variant": "evolving", "options": the variant's whole config ({"alpha": ...}),
               "max_seq": the longest input (<= the model's position table),
               "transformers_version": the version that wrote it}
  model       a summary derived from "hf", in the shape `info` and the ONNX metadata use:
              {"family": "hf", "variant", "head": "classification" | "tagging", "num_labels",
               "vocab_size", "max_seq", "d_model", "n_heads", "n_layers", "d_ff",
               "architecture", "model_type", <variant>: options}
  labels      label names (index = class id; also the HF config's id2label)
  tokenizer   `WordPieceTokenizer.to_dict()` ({"type": "wordpiece", ...}) or null
  data, training, metrics, weights_sha256   as for built-in checkpoints
model.safetensors holds the converted model's `state_dict()` under the transformers names (the
converted layers under `...attention.self.attention.*`, GA-Net's gate network under
`...embeddings.gate_network.*`).

Reading trusts nothing in config.json: the architecture must be one `convert` supports, the
transformers config is checked before anything is built (`hf_config`: its sizes are bounded as
attndeploy's own are), and the safetensors header's names, shapes and dtypes are compared with
the configured model built on the meta device before weights load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attndeploy.configbase import json_ready
from attndeploy.errors import AttnDeployError, CheckpointError, ConfigError
from attndeploy.families.registry import family_specs
from attndeploy.integrations.hf_config import check_model, check_sizes, config_from_dict
from attndeploy.integrations.hf_hooks import hold_open
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer
from attndeploy.integrations.transformers import (
    SUPPORTED_CLASSES,
    conversion_of,
    convert,
    forward_state,
    layer_modules,
    supported_class,
)
from attndeploy.models.inputs import check_model_inputs, position_limit
from attndeploy.variants.api import soft_density
from attndeploy.variants.functional import hard_gates
from attndeploy.variants.registry import variant_spec

FAMILY = "hf"
TOKEN_TYPE_MODELS = ("bert", "roberta")  # model types with segment (token type) embeddings


def _checkpointed_heads() -> dict[str, str]:
    """{transformers class: head} of the architectures a checkpoint holds: every class `convert`
    supports whose name ends with one of a family's `hf_heads` (`ForSequenceClassification` ->
    text-classification's `classification`), in family order (the model-level interface of
    docs/ops.md)."""
    heads = {}
    for spec in family_specs():
        for suffix in spec.hf_heads:
            for names in SUPPORTED_CLASSES.values():
                heads.update({name: spec.head for name in names if name.endswith(suffix)})
    return heads


# The checkpointed architectures and their heads, from the families' specs.
HEADS = _checkpointed_heads()
# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class HFModelConfig:
    """What attndeploy needs to know about a converted HF model (the checkpoint's "model"
    summary). Duck-types the fields of `ModelConfig` that export, validation and serving read."""

    variant: str
    head: str
    num_labels: int
    vocab_size: int
    max_seq: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int
    architecture: str
    model_type: str
    options: dict[str, Any] = field(default_factory=dict)
    family: str = FAMILY

    def to_dict(self) -> dict[str, Any]:
        summary = {
            "family": self.family, "variant": self.variant, "head": self.head,
            "num_labels": self.num_labels, "vocab_size": self.vocab_size,
            "max_seq": self.max_seq, "d_model": self.d_model, "n_heads": self.n_heads,
            "n_layers": self.n_layers, "d_ff": self.d_ff, "architecture": self.architecture,
            "model_type": self.model_type,
        }
        if self.options:
            summary[self.variant] = json_ready(dict(self.options))
        return summary


def model_config_of(model: nn.Module, max_seq: int) -> HFModelConfig:
    """The `HFModelConfig` of a converted classification/tagging model."""
    conversion = conversion_of(model)
    if conversion is None:
        raise ConfigError(f"{type(model).__name__} is not converted; call "
                          "attndeploy.integrations.transformers.convert first")
    architecture = type(model).__name__
    if architecture not in HEADS:
        raise ConfigError(f"an attndeploy checkpoint holds one of {', '.join(HEADS)}; "
                          f"got {architecture}")
    config = model.config
    if not 1 <= max_seq <= position_limit(config):
        raise ConfigError(f"max_seq must lie in [1, {position_limit(config)}] (the model's "
                          f"position table); got {max_seq}")
    layers = conversion.layer_config
    return HFModelConfig(
        variant=conversion.variant, head=HEADS[architecture], num_labels=config.num_labels,
        vocab_size=config.vocab_size, max_seq=max_seq, d_model=layers.d_model,
        n_heads=layers.n_heads, n_layers=layers.n_layers, d_ff=layers.d_ff,
        architecture=architecture, model_type=conversion.model_type,
        options=dict(conversion.options),
    )


class HFClassifier(nn.Module):
    """A converted HF classifier or tagger behind attndeploy's model-level interface.

    `forward(input_ids [B,T], attention_mask [B,T]) -> {"logits": [B,C] or [B,T,C],
    "gates": bool [B,T] (a gated variant)}`; with `details=True` also "gate_logits" (the logits
    the gates were decided on) and in training "density_penalty" (R, docs/variants.md §3.5, of
    the soft gates its gate machinery gave), as the built-in models (`attndeploy.train.evaluate`
    and the validators call it this way).
    """

    def __init__(self, model: nn.Module, config: HFModelConfig) -> None:
        super().__init__()
        self.model = model
        self.config = config
        self._gated = variant_spec(config.variant).gated  # once: the registry reads files

    @property
    def is_gated(self) -> bool:
        return self._gated

    def _gate_network(self) -> nn.Module:
        network = conversion_of(self.model).gate_network if self.is_gated else None
        if network is None:
            raise ConfigError(f"variant {self.config.variant!r} has no gates")
        return network

    @torch.no_grad()
    def gate_scores(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The gate network's logits s [B, T] for these inputs, without noise: what the model's
        hook scores at the token lookup (`open_token_ids` held open), without running the
        encoder layers."""
        network = self._gate_network()
        embeddings = self.model.base_model.embeddings.word_embeddings(input_ids)  # [B, T, E]
        scores = network.scores(embeddings, attention_mask != 0)  # [B, T]
        return hold_open(scores, input_ids, tuple(self.config.options.get("open_token_ids", ())))

    @torch.no_grad()
    def shift_gate_threshold(self, shift: float) -> None:
        """Move every gate logit by `shift` for good (the gate machinery's `shift_threshold`)."""
        self._gate_network().shift_threshold(shift)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, *, details: bool = False
    ) -> dict[str, Tensor]:
        if not torch.compiler.is_compiling():  # data-dependent checks cannot be traced
            check_model_inputs(input_ids, attention_mask, max_seq=self.config.max_seq,
                               vocab_size=self.config.vocab_size)
        extra = {}
        if self.config.model_type in TOKEN_TYPE_MODELS:
            # Segment 0 everywhere, as the model's default; passed explicitly because the
            # default gathers from a buffer (ONNX GatherElements), which onnx 1.23's reference
            # evaluator computes wrongly for more than 32 positions (np.choose's limit).
            extra["token_type_ids"] = torch.zeros_like(input_ids)
        out = {"logits": self.model(input_ids=input_ids, attention_mask=attention_mask,
                                    **extra).logits}
        if not self.is_gated:
            return out
        state = forward_state(self.model)
        mask = attention_mask != 0
        gates = state.gates
        if gates is None:  # no layer ran (cannot happen for a converted encoder)
            with torch.no_grad():
                gates = hard_gates(state.gate_logits, mask)
        out["gates"] = gates
        if details:
            out["gate_logits"] = state.gate_logits
            soft = state.gate_state.soft_gates  # g_soft [B, T] in training
            if self.training and soft is not None:
                out["density_penalty"] = soft_density(soft, mask)
        return out


# ----------------------------------------------------------------------------- save


def save_hf_checkpoint(
    model: HFClassifier,
    out_dir: Path,
    *,
    label_names: tuple[str, ...] | list[str],
    tokenizer: WordPieceTokenizer | None = None,
    data: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    force: bool = False,
) -> Path:
    """Write the checkpoint atomically; an existing directory is replaced only with `force`.

    A warm-started conversion is saved only once its variant is whole (`warm_start_progress`
    1): the checkpoint records the variant's hyperparameters, which loading applies as they are.
    """
    from transformers import __version__ as transformers_version

    from attndeploy.checkpoint import write_checkpoint

    config, hf_model = model.config, model.model
    conversion = conversion_of(hf_model)
    if conversion is not None and not all(layer.attention.warm_start_complete
                                          for layer in layer_modules(hf_model)):
        raise ConfigError(
            f"the warm-started {conversion.variant} conversion is only "
            f"{conversion.warm_start_progress:.0%} of the way to its variant, which a checkpoint "
            "cannot record: fine-tune it first, or call attndeploy.integrations.warm_start."
            "set_warm_start_progress(model, 1.0)")
    hf_config = hf_model.config.to_dict()
    hf_config["id2label"] = {str(i): name for i, name in enumerate(label_names)}
    hf_config["label2id"] = {name: i for i, name in enumerate(label_names)}
    hf_section = {
        "architecture": config.architecture, "model_type": config.model_type,
        "config": hf_config, "variant": config.variant, "options": config.options,
        "max_seq": config.max_seq, "transformers_version": transformers_version,
    }
    return write_checkpoint(
        out_dir, hf_model.state_dict(), model_section=config.to_dict(),
        num_labels=config.num_labels, label_names=label_names, tokenizer=tokenizer,
        vocab_size=config.vocab_size, extra_sections={"hf": hf_section}, data=data,
        training=training, metrics=metrics, force=force,
    )


# ----------------------------------------------------------------------------- read


def _hf_section(raw: dict[str, Any], source: Path) -> dict[str, Any]:
    hf = raw.get("hf")
    if not isinstance(hf, dict):
        raise CheckpointError(f"{source}: 'hf' must be a JSON object")
    for key, kind in (("architecture", str), ("variant", str), ("config", dict),
                      ("options", dict), ("max_seq", int)):
        if not isinstance(hf.get(key), kind) or isinstance(hf.get(key), bool):
            raise CheckpointError(f"{source}: hf.{key} must be a {kind.__name__}")
    if hf["architecture"] not in HEADS:
        raise CheckpointError(f"{source}: hf.architecture must be one of {', '.join(HEADS)}; "
                              f"got {hf['architecture']!r}")
    check_sizes(hf["config"], f"{source}: hf config ", CheckpointError)
    return hf


def _hf_config(hf: dict[str, Any]) -> Any:
    """The transformers config object of an `hf` section (its class follows the architecture,
    never a name read from the file)."""
    cls = supported_class(hf["architecture"])
    config = config_from_dict(cls.config_class, hf["config"], "hf config ")
    if config.model_type != cls.config_class.model_type:
        raise ConfigError(f"hf config model_type {config.model_type!r} does not fit "
                          f"{hf['architecture']}")
    check_model(config, "hf config ")
    return config


def build_hf_model(hf: dict[str, Any], *, device: str | torch.device | None = None) -> HFClassifier:
    """The converted model an `hf` section describes, weights uninitialised (to be loaded)."""
    from transformers.initialization import no_init_weights

    cls = supported_class(hf["architecture"])
    config = _hf_config(hf)
    with torch.device(device or "cpu"), no_init_weights():  # every weight is loaded next
        model = convert(cls(config), hf["variant"], warm_start=False, **hf["options"])
    return HFClassifier(model, model_config_of(model, hf["max_seq"]))


def read_hf_checkpoint(path: Path, raw: dict[str, Any], digest: str) -> Any:
    """The `Checkpoint` of a converted HF model (called by `read_checkpoint`, which has read
    `raw` from config.json and checked the weights' SHA-256 `digest`)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from attndeploy.checkpoint import (
        CONFIG_FILE,
        WEIGHTS_FILE,
        Checkpoint,
        check_tensors,
        header_tensors,
    )

    path = Path(path)
    source = path / CONFIG_FILE
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise CheckpointError(f"{path} holds a Hugging Face model; reading it needs transformers "
                              '(pip install "attndeploy[hf]")') from exc
    hf = _hf_section(raw, source)
    try:
        # names and shapes first, from a model on the meta device (no memory)
        expected = build_hf_model(hf, device="meta").model.state_dict()
        labels = tuple(str(x) for x in raw.get("labels") or ())
        tokenizer = (WordPieceTokenizer.from_dict(raw["tokenizer"]) if raw.get("tokenizer")
                     else None)
    except AttnDeployError as exc:
        raise CheckpointError(f"{source}: {exc}") from exc
    except (TypeError, ValueError) as exc:  # transformers' own config checks
        raise CheckpointError(f"{source}: hf config: {exc}") from exc
    weights_path = path / WEIGHTS_FILE
    check_tensors({n: (tuple(t.shape), str(t.dtype)) for n, t in expected.items()},
                   header_tensors(weights_path), weights_path)
    model = build_hf_model(hf)
    config = model.config
    if len(labels) != config.num_labels:
        raise CheckpointError(f"{source}: {len(labels)} labels for {config.num_labels} classes")
    if tokenizer is not None and len(tokenizer) > config.vocab_size:
        raise CheckpointError(f"{source}: the tokenizer has {len(tokenizer)} pieces, more than "
                              f"the model's vocab_size {config.vocab_size}")
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{weights_path} is corrupt: {exc}") from exc
    model.model.load_state_dict(tensors, strict=True, assign=True)
    model.eval()
    return Checkpoint(path, model, config, labels, tokenizer, digest, raw)
