"""A Hugging Face config read from a file, checked before any model is built.

`attndeploy train --hf-model DIR` reads DIR/config.json (`hf_data.load_source`), and a converted
checkpoint keeps the transformers config in its own config.json (`hf_checkpoint`): both are files
attndeploy may not have written, or that were edited. Left to transformers, a bad value ends deep
inside building the model (a negative width, zero heads), or after minutes and gigabytes (a
million layers), so before anything is built:

- `check_sizes`, on the file's JSON object: every size is an integer in [1, limit], the limits of
  attndeploy's own configs (`configbase.SIZE_LIMITS`) under the names BERT/RoBERTa and DistilBERT
  give them (`HF_LIMITS`). It runs before `from_dict`, which would make a label name per class
  of a num_labels of 10^9;
- `config_from_dict`: the transformers config, without the keys that could fetch code
  (`KERNEL_KEYS`), its own field checks turned into one line;
- `check_model`: the width divides among the heads, the activation is one transformers has, the
  dropout rates lie in [0, 1] and the pad id is in the vocabulary;
- `check_parameters`, for a model made from the config rather than read from a checkpoint's
  weights (whose file backs its sizes): at most `MAX_PARAMETERS` parameters in all.

Each check raises `error` (ConfigError unless told) with a one-line message that starts with
`where` (the file, and what in it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attndeploy.configbase import SIZE_LIMITS, above_limit
from attndeploy.errors import AttnDeployError, ConfigError

# The sizes of a transformers config -> the attndeploy size they are (BERT/RoBERTa's names, then
# DistilBERT's): one limit each, attndeploy's own.
HF_SIZES: dict[str, str] = {
    "vocab_size": "vocab_size", "num_labels": "num_labels",
    "hidden_size": "d_model", "dim": "d_model",
    "num_hidden_layers": "n_layers", "n_layers": "n_layers",
    "num_attention_heads": "n_heads", "n_heads": "n_heads",
    "intermediate_size": "d_ff", "hidden_dim": "d_ff",
    "max_position_embeddings": "max_seq",
}
HF_LIMITS: dict[str, int] = {
    **{name: SIZE_LIMITS[own] for name, own in HF_SIZES.items()},
    "type_vocab_size": 1_024,  # BERT's segments (2); attndeploy models have none
}
# A model made from a config alone (random weights) has no weights file to back its sizes: at
# most this many parameters (16 GB in fp32), ten times BERT-large's 0.34 billion. Sizes within
# their own limits could otherwise still ask for terabytes together (65,536 wide, 1,024 deep).
MAX_PARAMETERS = 4_000_000_000
PROBLEM = "the config is corrupt or was edited"

# Config keys that choose a kernel: a Hub kernel name ("kernels-community/...") would make
# transformers download and run code. The converted layers use no HF attention kernel anyway.
KERNEL_KEYS = ("attn_implementation", "experts_implementation", "_attn_implementation",
               "_attn_implementation_internal", "_experts_implementation",
               "_experts_implementation_internal")


@dataclass(frozen=True)
class _Names:
    """Where a model type keeps each setting in its config."""

    width: str
    layers: str
    heads: str
    ff: str
    activation: str
    dropouts: tuple[str, ...]
    segments: str | None  # token type vocabulary (None: the model has none)


_BERT = _Names("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", ("hidden_dropout_prob", "attention_probs_dropout_prob",
                              "classifier_dropout"), "type_vocab_size")
NAMES: dict[str, _Names] = {
    "bert": _BERT,
    "roberta": _BERT,
    "distilbert": _Names("dim", "n_layers", "n_heads", "hidden_dim", "activation",
                         ("dropout", "attention_dropout", "seq_classif_dropout", "qa_dropout"),
                         None),
}


def _shown(value: Any) -> str:
    """`repr(value)`, cut to a length a one-line message can carry."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_sizes(raw: dict[str, Any], where: str,
                error: type[AttnDeployError] = ConfigError) -> None:
    """Every size `raw` (a config's JSON object) gives is an integer in [1, its limit]."""
    for name, limit in HF_LIMITS.items():
        if name not in raw:
            continue  # the config class's default
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"{where}{name} must be an integer, got {_shown(value)}")
        if value < 1:
            raise error(f"{where}{name} must be at least 1, got {value}")
        if (problem := above_limit(name, value, limit)) is not None:
            raise error(f"{where}{problem}; {PROBLEM}")


def safe_config_dict(raw: dict[str, Any]) -> dict[str, Any]:
    """A transformers config dict without the keys that could fetch code (`KERNEL_KEYS`)."""
    return {key: value for key, value in raw.items() if key not in KERNEL_KEYS}


def config_from_dict(config_class: Any, raw: dict[str, Any], where: str,
                     error: type[AttnDeployError] = ConfigError) -> Any:
    """`config_class.from_dict` of `raw` without `KERNEL_KEYS` (no Hub kernels); its own checks
    (transformers validates field types) become one line."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older huggingface_hub: no strict dataclasses, nothing to catch
        StrictDataclassError = ValueError  # noqa: N806
    try:
        return config_class.from_dict(safe_config_dict(raw))
    except (TypeError, ValueError, StrictDataclassError) as exc:
        raise error(f"{where}{' '.join(str(exc).split())}") from None


def check_model(config: Any, where: str, error: type[AttnDeployError] = ConfigError) -> None:
    """What transformers would fail on while building the model `config` describes (sizes:
    `check_sizes`)."""
    names = NAMES.get(config.model_type)
    if names is None:
        raise error(f"{where}model_type {config.model_type!r} is not one attndeploy converts; "
                    f"supported: {', '.join(NAMES)}")
    width, heads = getattr(config, names.width), getattr(config, names.heads)
    if width % heads:
        raise error(f"{where}{names.width} ({width}) must be divisible by {names.heads} "
                    f"({heads})")
    activation = getattr(config, names.activation)
    from transformers.activations import ACT2FN

    if not isinstance(activation, str) or activation not in ACT2FN:
        raise error(f"{where}{names.activation} {_shown(activation)} is not an activation "
                    f"transformers has; use one of {', '.join(sorted(ACT2FN))}")
    for name in names.dropouts:
        rate = getattr(config, name, None)
        if rate is None:
            continue  # e.g. classifier_dropout: the hidden layers' rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise error(f"{where}{name} must lie in [0, 1], got {_shown(rate)}")
    pad, vocab = getattr(config, "pad_token_id", None), config.vocab_size
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int)
                            or not 0 <= pad < vocab):
        raise error(f"{where}pad_token_id {_shown(pad)} is not an id of the vocabulary of "
                    f"{vocab:,}; {PROBLEM}")


def parameter_count(config: Any) -> int:
    """About how many parameters the encoder and head `config` describes hold: the embeddings
    and, per layer, the four attention projections and the two feed-forward ones (biases and
    norms, a fraction of a percent, left out)."""
    names = NAMES[config.model_type]
    width, ff = getattr(config, names.width), getattr(config, names.ff)
    segments = getattr(config, names.segments) if names.segments else 0
    rows = config.vocab_size + config.max_position_embeddings + segments
    layers = getattr(config, names.layers) * (4 * width * width + 2 * width * ff)
    return rows * width + layers + width * (width + config.num_labels)


def check_parameters(config: Any, where: str,
                     error: type[AttnDeployError] = ConfigError) -> None:
    """A model made from `config` alone holds at most `MAX_PARAMETERS` parameters."""
    count = parameter_count(config)
    if count > MAX_PARAMETERS:
        raise error(f"{where}the model it describes has about {count:,} parameters, above the "
                    f"limit of {MAX_PARAMETERS:,}; {PROBLEM}")
