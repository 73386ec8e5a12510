"""`ganet`: gated attention (docs/variants.md §3): an auxiliary network gates which keys are
attended; hard gates at inference, an extra `gates` output."""

from attndeploy.errors import ConfigError, ExportError
from attndeploy.variants.ganet.config import GANetConfig
from attndeploy.variants.registry import VariantSpec, register_variant


def _model_ops(config) -> dict[str, int]:
    """One gated node per encoder layer, and the gated pooling of a classifier."""
    ops = {"GatedAttention": config.n_layers} if config.family == "transformer" else {}
    if config.head == "classification":
        ops["GatedAttentionPooling"] = 1
    return ops


def _lstm_runs(config) -> int:
    return 2 if config.ganet.aux == "bilstm" else 0  # gate network: 1 layer x 2 directions


def _check(config) -> None:
    if config.family == "bilstm" and config.ganet.aux != "bilstm":
        raise ConfigError(
            "the bilstm family's GA-Net model uses the paper's BiLSTM gate network: "
            "set ganet aux to 'bilstm'"
        )


def _export_check(config) -> None:
    if config.ganet.gate_mode != "threshold":
        raise ExportError(
            "GA-Net gate_mode 'sample' draws random gates (PyTorch only); export needs the "
            "deterministic 'threshold' mode: set ganet gate_mode to 'threshold'"
        )


SPEC = register_variant(VariantSpec(
    name="ganet",
    order=2,
    summary="an auxiliary network gates which tokens are attended to (hard gates at inference)",
    layer="attndeploy.variants.ganet.layer:GatedAttention",
    config=GANetConfig,
    ops="attndeploy.variants.ganet.ops",
    outputs=("gates",),
    families=("transformer", "bilstm"),
    model_ops=_model_ops,
    lstm_runs=_lstm_runs,
    check=_check,
    export_check=_export_check,
))
