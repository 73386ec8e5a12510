"""The public extension API: what a variant's package (in this tree or a plug-in) builds on.

    AttentionBase          a layer's projections, head split/merge, `scale`, the model hand-off
    LayerContext           what the built-in models hand every layer and the pooling per pass
    LayerResult            a layer's output and what it hands on (`logits`: a chained variant)
    call_op                the reference eagerly, one `attndeploy` ONNX node while exporting
    as_key_padding_mask    a layer's mask argument as bool [B, T]
    split_heads, merge_heads, per_head_weight
    GateState              a gated variant's gates for one pass (its gate machinery's output)
    soft_density, relaxed_probs, gated_pooling
                           what every gated variant shares (the density, the relaxed weights,
                           the gated pooling of the classifier head)
    PaddedBiLSTM, run_lstm, override_lstm, reverse_within_length
                           a padding-aware BiLSTM that exports as ONNX `LSTM` nodes
    CausalResult, LayerState, causal_allowed, full_key_mask, past_length, with_past,
    reorder_state, state_names, state_bytes
                           what a causal (decoder) layer shares: its result, its named cache
                           state, the causal rule, beam reordering, Optimum's state names
    Rotary, apply_rotary, half_turn
                           rotary positions (a LLaMA-family decoder's): the angles a model
                           hands its layers, how a layer turns its queries and keys

The names live in `variants/_common.py`, `_gating.py`, `_recurrent.py` and `_causal.py`; import
them from here (docs/adding-a-variant.md). The ops' PyTorch references are
`attndeploy.variants.functional`.
"""

from attndeploy.variants._causal import (
    CausalResult,
    LayerState,
    Rotary,
    apply_rotary,
    causal_allowed,
    full_key_mask,
    half_turn,
    past_length,
    reorder_state,
    state_bytes,
    state_names,
    with_past,
)
from attndeploy.variants._common import (
    AttentionBase,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
    call_op,
    merge_heads,
    per_head_weight,
    split_heads,
)
from attndeploy.variants._gating import GateState, gated_pooling, relaxed_probs, soft_density
from attndeploy.variants._recurrent import (
    LSTMRunner,
    PaddedBiLSTM,
    override_lstm,
    reverse_within_length,
    run_lstm,
)

__all__ = [
    "AttentionBase",
    "CausalResult",
    "LayerState",
    "Rotary",
    "apply_rotary",
    "half_turn",
    "causal_allowed",
    "full_key_mask",
    "past_length",
    "reorder_state",
    "state_bytes",
    "state_names",
    "with_past",
    "GateState",
    "LSTMRunner",
    "LayerContext",
    "LayerResult",
    "PaddedBiLSTM",
    "as_key_padding_mask",
    "call_op",
    "gated_pooling",
    "merge_heads",
    "override_lstm",
    "per_head_weight",
    "relaxed_probs",
    "reverse_within_length",
    "run_lstm",
    "soft_density",
    "split_heads",
]
