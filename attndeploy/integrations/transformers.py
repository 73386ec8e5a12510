"""Swap the self-attention of Hugging Face BERT-family encoders for an attndeploy variant.

    from transformers import BertConfig, BertForSequenceClassification
    from attndeploy.integrations.transformers import convert

    model = BertForSequenceClassification(BertConfig(...))   # or .from_pretrained(a local dir)
    convert(model, "evolving", alpha=0.5, beta=1.0)          # in place; returns the model
    out = model(input_ids=ids, attention_mask=mask)          # same signature, same outputs

Letters: B batch, T positions, D hidden size, H heads, L layers.

What `convert` changes (and nothing else):
- Every self-attention module (`BertSelfAttention`, `RobertaSelfAttention`,
  `DistilBertSelfAttention`) becomes a `ConvertedSelfAttention` holding the variant's
  `attndeploy.nn` layer, built through the variant registry (`VariantSpec.layer`). The layer's
  `qkv` holds the model's query, key and value weights, so a pretrained model starts from its own
  projections. The output projection stays where the model has it: BERT and RoBERTa keep
  `attention.output.dense` (the layer's `out` is the identity); DistilBERT's `out_lin` is copied
  into the layer's `out`.
- Warm start (`warm_start=True`, the default; docs/variants.md §7): the converted model computes
  what the model computed before, so fine-tuning starts from the pretrained function and moves it
  into the variant. QVI's maps make the query-aware values equal the values; GA-Net's gate
  network opens every gate (its last layer's weight 0, bias `OPEN_GATE_LOGIT`) and the density
  penalty closes them while training; Evolving Attention's conv is the identity and its mixing
  weights α, β start at 0 and reach the asked values as
  `integrations.warm_start.set_warm_start_progress(model, f)`
  goes to 1 (fine-tuning does this over its first steps; a loop of your own calls it). In eval
  mode the converted model's outputs equal the original's up to float rounding (tested at
  1e-5). `warm_start=False` leaves the variant's parameters at the layers' own initialisation
  and α, β at their values (what loading a checkpoint uses: the weights come from the file).
- The mask: a forward pre-hook on the base model (`model.base_model`) reads the 2-D
  `attention_mask` [B, T] (non-zero = real token) as the layers' `key_padding_mask` and hands the
  model None instead, so it builds no 4-D additive mask that nothing would read.
- Every layer runs through its `forward_context`, as in attndeploy's own models, and whatever
  the variant needs beyond its layers comes from its `VariantSpec`: a gated variant's gates from
  its gate machinery (`gating`), a chain through the layers from `chained`, the lower layers left
  as they were from `layer_span`, the training hooks from `training`. So a registered plug-in
  variant converts as the built-in ones do.
- Evolving attention (EA-BERT, a `chained` variant): one chain through the encoder stack.
  Layer 0 starts it (vanilla, no conv); layer l > 0 mixes its logits with those layer l-1
  handed on ([B, H, T, T]). With the
  option `evolving_layers="upper_half"` (the `train --hf-model` default) every layer of the lower
  half starts the chain anew (vanilla attention, no conv) and only the upper half mixes, the
  first of them with the logits of the layer below it; `"upper_third"` mixes in the top third.
- A gated variant: ONE gate machinery (its spec's `gating` class, through its
  `for_conversion(embed_dim, model_config)` where it has one; registered as
  `<embeddings>.gate_network`) turns the token embeddings into this pass's `GateState` once per
  forward pass, and every layer is handed its `layer_context`; a warm start calls its
  `start_open()`. GA-Net's is its `GateNetwork` (`ConvertedGates`), which scores the token
  embeddings (the word-embedding table's output, before positions; docs/variants.md §3.2) once per
  forward pass; every layer gates its keys with those logits. The ids of the option
  `open_token_ids` (e.g. a tokenizer's [CLS] and [SEP], where a pretrained BERT's heads park
  attention) always get the logit `ALWAYS_OPEN_LOGIT`. Not the default: on MiniLM and the Debian
  descriptions keeping [CLS] and [SEP] open cost about 2 points at density 0.5 (two of a short
  text's eleven pieces spend the density on them, and the gates close content words instead).
  With the option `gated_layers="upper_half"` the lower half of the layers (`open_layers`) run
  the same gated op with every logit at `ALWAYS_OPEN_LOGIT`: they attend every key, and only the
  upper half attends the tokens the gates keep; `"upper_third"` (the `train --hf-model` default,
  docs/variants.md §7) keeps the lower two thirds open. After a forward pass,
  `forward_state(model).gates` holds the gates the last layer applied (bool [B, T]) and
  `.gate_logits` the logits they were decided on (plus logistic noise in training).

Not carried over: the attention-probability dropout of the original layers (the attndeploy
layers have none; hidden dropout is unchanged) and attention weights (`output_attentions`).
Refused: decoders and cross-attention, 4-D attention masks, what a gate machinery's
`check_conversion` refuses (GA-Net `gate_mode` `sample`), and gradient checkpointing with a
chained variant (a recomputed layer would read the wrong chain).
The hooks belong to the converted model: deep-copy a model before converting it, not after (a
copy's layers refuse to run).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attndeploy.config import ModelConfig
from attndeploy.configbase import layers_below
from attndeploy.errors import ConfigError
from attndeploy.integrations.hf_hooks import ALWAYS_OPEN_LOGIT, ForwardState, install_hooks
from attndeploy.variants.api import AttentionBase, LayerContext
from attndeploy.variants.registry import VariantSpec, variant_spec

__all__ = [
    "SUPPORTED_CLASSES",
    "Conversion",
    "ConvertedSelfAttention",
    "ForwardState",
    "conversion_of",
    "convert",
    "forward_state",
    "supported_class",
    "variant_config",
]

# model_type -> the transformers classes `convert` takes (exact names in transformers 5.x).
SUPPORTED_CLASSES: dict[str, tuple[str, ...]] = {
    "bert": (
        "BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
        "BertForSequenceClassification", "BertForMultipleChoice", "BertForTokenClassification",
        "BertForQuestionAnswering",
    ),
    "roberta": (
        "RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification",
        "RobertaForMultipleChoice", "RobertaForTokenClassification",
        "RobertaForQuestionAnswering",
    ),
    "distilbert": (
        "DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification",
        "DistilBertForMultipleChoice", "DistilBertForTokenClassification",
        "DistilBertForQuestionAnswering",
    ),
}
CONVERSION_ATTR = "_attndeploy_conversion"
GATE_NETWORK_NAME = "gate_network"


def _supported_names() -> str:
    return ", ".join(name for names in SUPPORTED_CLASSES.values() for name in names)


def supported_class(name: str) -> type:
    """The transformers class called `name`, if `convert` supports it (ConfigError otherwise)."""
    for names in SUPPORTED_CLASSES.values():
        if name in names:
            import transformers

            return getattr(transformers, name)
    raise ConfigError(f"attndeploy converts {_supported_names()}; not {name!r}")


def _model_type(model: nn.Module) -> str:
    """"bert", "roberta" or "distilbert" for a supported model; a one-line ConfigError naming
    the supported classes otherwise."""
    import transformers

    for model_type, names in SUPPORTED_CLASSES.items():
        if isinstance(model, tuple(getattr(transformers, name) for name in names)):
            return model_type
    raise ConfigError(
        f"attndeploy.integrations.transformers.convert supports {_supported_names()}; "
        f"got {type(model).__name__}"
    )


# ----------------------------------------------------------------------------- options


def variant_config(variant: str, options: dict[str, Any] | None = None) -> Any:
    """The variant's sub-config (e.g. `EvolvingConfig`) with `options` applied; None for a
    variant without options. Unknown options list the valid ones."""
    spec = variant_spec(variant)  # an unknown variant lists the valid ones
    options = dict(options or {})
    if spec.config is None:
        if options:
            raise ConfigError(f"variant {variant!r} takes no options; got {', '.join(options)}")
        return None
    valid = [f.name for f in dataclasses.fields(spec.config)]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"unknown {variant} option(s) {', '.join(unknown)}; valid: "
                          f"{', '.join(valid)}")
    config = spec.config(**options)  # validates, says what to change
    check = getattr(spec.gating_class(), "check_conversion", None) if spec.gated else None
    if check is not None:  # what its gate machinery cannot do in a converted model
        check(config)
    return config


def gate_machinery(spec: VariantSpec, embed_dim: int, layer_config: ModelConfig) -> nn.Module:
    """A gated variant's gates for a converted model: its spec's machinery class builds them,
    through its `for_conversion(embed_dim, model_config)` when it has one (GA-Net: its gate
    network, under the names its checkpoints hold), else as it does in attndeploy's own models
    (`Class(embed_dim, model_config)`)."""
    machinery = spec.gating_class()
    build = getattr(machinery, "for_conversion", None)
    return build(embed_dim, layer_config) if build is not None else machinery(embed_dim,
                                                                               layer_config)


# ----------------------------------------------------------------------------- state


@dataclass
class Conversion:
    """What `convert` did to a model (`conversion_of(model)`)."""

    variant: str
    options: dict[str, Any]  # the variant's whole sub-config, defaults included
    model_type: str  # "bert", "roberta" or "distilbert"
    layer_config: ModelConfig  # what the layers were built from (head "tagging": no pooling)
    state: ForwardState
    num_layers: int
    gate_network: nn.Module | None = None  # a gated variant's gate machinery
    hooks: list[Any] = field(default_factory=list, repr=False)
    warm_start: bool = False  # started at the original function (module docstring)
    warm_start_progress: float = 1.0  # how far the variant's hyperparameters have come in

    @property
    def gated(self) -> bool:
        return variant_spec(self.variant).gated

    def expected_nodes(self) -> Counter:
        """The `attndeploy` ONNX nodes an export of the model holds: one per layer."""
        return Counter(variant_spec(self.variant).model_ops(self.layer_config))

    def expected_lstm_nodes(self) -> int:
        """Standard `LSTM` nodes (a BiLSTM gate network: one per direction)."""
        return variant_spec(self.variant).lstm_runs(self.layer_config)


def conversion_of(model: nn.Module) -> Conversion | None:
    """The `Conversion` of a model `convert` changed, else None."""
    return getattr(model, CONVERSION_ATTR, None)


def forward_state(model: nn.Module) -> ForwardState:
    """The per-pass state of a converted model (GA-Net: `.gates` and `.gate_logits`)."""
    conversion = conversion_of(model)
    if conversion is None:
        raise ConfigError(f"{type(model).__name__} was not converted by attndeploy")
    return conversion.state


# ----------------------------------------------------------------------------- the layer


class ConvertedSelfAttention(nn.Module):
    """Stands in for a BERT-family self-attention module: `forward(hidden_states [B,T,D], ...)
    -> (context [B,T,D], None)`, computed by `attention`, an `attndeploy.nn` layer, through its
    `forward_context` as in attndeploy's own models.

    The key padding mask, a gated variant's layer context and a chained variant's carried logits
    come from the model's `ForwardState` (set by the base model's hooks); the HF mask argument is
    not read.
    """

    def __init__(self, attention: AttentionBase, state: ForwardState, *, index: int,
                 gated: bool, open_gates: bool = False) -> None:
        super().__init__()
        self.attention = attention
        self.index = index
        self.gated = gated
        self.open_gates = open_gates  # a gated layer below the spec's layer_span: every key open
        self._state = state  # a plain attribute: shared by every layer of one model

    def forward(
        self, hidden_states: Tensor, attention_mask: Any = None, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, None]:
        state = self._state
        if not state.active:
            raise ConfigError(
                f"converted attention layer {self.index} runs inside its model's forward pass "
                "(the model's hooks set its mask); call the model, not the layer"
            )
        context = state.context if self.gated else LayerContext(state.key_padding_mask)
        if self.open_gates:  # the same layer, every gate held open (hard, in training too)
            context = dataclasses.replace(
                context, gate_logits=torch.full_like(context.gate_logits, ALWAYS_OPEN_LOGIT),
                log_gates=None, hard_gates=None)  # [B, T]
        result = self.attention.forward_context(hidden_states,
                                                context.with_prev_logits(state.prev_logits))
        state.prev_logits = result.logits  # [B, H, T, T] (a chained variant) or None
        if self.gated and not self.open_gates:
            state.gates = result.gates  # [B, T] where the layer reports them
        return result.output, None

    def extra_repr(self) -> str:
        return f"index={self.index}" + (", open_gates=True" if self.open_gates else "")


# ----------------------------------------------------------------------------- model surgery


@dataclass(frozen=True)
class _Site:
    """One self-attention module of the model and the projections it holds."""

    parent: nn.Module
    name: str  # attribute of `parent` that holds the self-attention module
    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    out: nn.Linear | None  # None: the output projection lives outside (BERT's attention.output)


def _sites(base: nn.Module, model_type: str) -> list[_Site]:
    if model_type == "distilbert":
        return [
            _Site(block, "attention", block.attention.q_lin, block.attention.k_lin,
                  block.attention.v_lin, block.attention.out_lin)
            for block in base.transformer.layer
        ]
    return [
        _Site(layer.attention, "self", layer.attention.self.query, layer.attention.self.key,
              layer.attention.self.value, None)
        for layer in base.encoder.layer
    ]


def _check_encoder(model: nn.Module, model_type: str) -> None:
    config = model.config
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ConfigError(f"{type(model).__name__} is configured as a decoder (is_decoder / "
                          "add_cross_attention); attndeploy converts encoders only")
    if conversion_of(model) is not None:
        raise ConfigError(f"{type(model).__name__} is already converted "
                          f"({conversion_of(model).variant}); convert a fresh model")


def _layer_config(config: Any, variant: str, sub: Any) -> ModelConfig:
    """A built-in model config with the HF model's sizes: what the registry's `from_config`
    builds layers from. Its head is the first family's whose head does not pool: the variant's
    `model_ops` then counts layers only."""
    from attndeploy.families.registry import family_specs

    unpooled = next(spec for spec in family_specs() if not spec.pooled)
    return ModelConfig(
        vocab_size=config.vocab_size, num_labels=2, variant=variant, family="transformer",
        head=unpooled.head, d_model=config.hidden_size, n_heads=config.num_attention_heads,
        n_layers=config.num_hidden_layers,
        d_ff=getattr(config, "intermediate_size", None) or config.hidden_dim,
        max_seq=config.max_position_embeddings, **({variant: sub} if sub is not None else {}),
    )


def _build_layer(spec: Any, layer_config: ModelConfig, index: int, site: _Site) -> AttentionBase:
    """The variant's layer `index`, holding the site's projection weights."""
    weight = site.query.weight
    layer = spec.layer_class().from_config(layer_config, index).to(weight.device, weight.dtype)
    if site.query.bias is None:
        raise ConfigError("attndeploy layers have biased Q/K/V projections; this model's "
                          "query projection has no bias")
    with torch.no_grad():
        layer.qkv.weight.copy_(torch.cat([site.query.weight, site.key.weight,
                                          site.value.weight]))  # [3D, D]
        layer.qkv.bias.copy_(torch.cat([site.query.bias, site.key.bias, site.value.bias]))
        if site.out is None:
            layer.out = nn.Identity()  # the model applies its own output projection after us
        else:
            layer.out.weight.copy_(site.out.weight)
            layer.out.bias.copy_(site.out.bias)
    return layer


def convert(model: nn.Module, variant: str, *, warm_start: bool = True,
            **options: Any) -> nn.Module:
    """Swap every self-attention layer of `model` for `variant`'s, in place; returns `model`.

    `model`: BertModel / BertFor*, RobertaModel / RobertaFor*, DistilBertModel / DistilBertFor*
    (transformers 5.x), an encoder. `variant`: a registered attndeploy variant (standard, qvi,
    ganet, evolving, or a plug-in's). `options`: fields of the variant's config, e.g.
    `form="pairwise"` (QVI), `aux="conv"`, `temperature=1.0` (GA-Net), `alpha=0.5, beta=1.0`
    (evolving).
    The model keeps its forward signature; with `warm_start` (the default) its outputs too, until
    training moves it (module docstring).
    """
    model_type = _model_type(model)
    _check_encoder(model, model_type)
    sub = variant_config(variant, options)
    spec = variant_spec(variant)
    base = model.base_model  # BertModel etc. (the model itself for a bare encoder)
    layer_config = _layer_config(base.config, variant, sub)
    sites = _sites(base, model_type)
    state = ForwardState()
    conversion = Conversion(
        variant=variant,
        options=dataclasses.asdict(sub) if sub is not None else {},
        model_type=model_type, layer_config=layer_config, state=state, num_layers=len(sites),
    )
    if spec.gated:
        embeddings = base.embeddings.word_embeddings.weight
        gate_network = gate_machinery(spec, embeddings.shape[1], layer_config).to(
            embeddings.device, embeddings.dtype)
        if warm_start and not hasattr(gate_network, "start_open"):
            raise ConfigError(f"a warm start opens every gate, and {variant!r}'s gate machinery "
                              f"({type(gate_network).__name__}) has no start_open(); convert "
                              "with warm_start=False")
        base.embeddings.add_module(GATE_NETWORK_NAME, gate_network)
        conversion.gate_network = gate_network
    open_below = open_layers(spec, sub, len(sites))
    for index, site in enumerate(sites):
        layer = _build_layer(spec, layer_config, index, site)
        if warm_start:
            layer.start_as_vanilla()
        setattr(site.parent, site.name,
                ConvertedSelfAttention(layer, state, index=index, gated=spec.gated,
                                       open_gates=index < open_below))
    if warm_start:
        conversion.warm_start, conversion.warm_start_progress = True, 0.0
        if conversion.gate_network is not None:
            conversion.gate_network.start_open()
    encoder_layers = list(base.transformer.layer if model_type == "distilbert"
                          else base.encoder.layer)
    conversion.hooks.extend(install_hooks(
        base, encoder_layers, state, conversion.gate_network, variant=conversion.variant,
        open_ids=tuple(conversion.options.get("open_token_ids", ()))))
    for module in layer_modules(model) + ([conversion.gate_network] if spec.gated else []):
        module.train(model.training)  # new modules take the model's mode (eval stays eval)
    object.__setattr__(model, CONVERSION_ATTR, conversion)  # not a module: no state-dict entry
    return model


def open_layers(spec: VariantSpec, config: Any, num_layers: int) -> int:
    """How many of the lowest layers of a gated variant attend every key (its spec's
    `layer_span`, GA-Net's `gated_layers`): none for "all", the lower half (rounded down) for
    "upper_half", the lower two thirds (rounded down) for "upper_third"; the top layer always
    gates. None for an ungated variant or one without a layer span."""
    if not spec.gated or spec.layer_span is None:
        return 0
    return layers_below(getattr(config, spec.layer_span), num_layers)


def layer_modules(model: nn.Module) -> list[ConvertedSelfAttention]:
    """The converted attention modules of `model`, in layer order."""
    return [m for m in model.modules() if isinstance(m, ConvertedSelfAttention)]

