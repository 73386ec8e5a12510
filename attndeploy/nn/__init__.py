"""Drop-in attention layers, like `torch.nn.MultiheadAttention` with `batch_first=True`.

Letters: B batch, T positions, D embed_dim, H num_heads.

Tensors: `x` float [B, T, D]; `key_padding_mask` bool [B, T], True = real token (an integer
`attention_mask` works too: non-zero = real). Every layer owns its Q/K/V projection `qkv`
(D -> 3D) and output projection `out` (D -> D); `scale` defaults to 1/sqrt(D / num_heads).

    QVIAttention(embed_dim, num_heads, *, form="pooled"|"pairwise", bias=True)
        forward(x, key_padding_mask) -> y [B, T, D]
    GateNetwork(embed_dim, *, kind="mlp"|"conv"|"bilstm", hidden=128)
        forward(x, key_padding_mask) -> gate_logits [B, T]       (+ logistic noise in training)
    GatedAttention(embed_dim, num_heads, *, temperature=1.0, straight_through=False,
                   relaxation="concrete"|"hard_concrete")
        forward(x, key_padding_mask, gate_logits) -> (y [B, T, D], gates bool [B, T])
    BudgetGatedAttention(embed_dim, num_heads, *, budget, temperature=1.0)
        forward(x, key_padding_mask, gate_logits) -> (y [B, T, D], gates bool [B, T])
        (the k = ceil(budget T) positions of largest logit attend, queries and keys; others 0)
    EvolvingAttention(embed_dim, num_heads, *, alpha=0.5, beta=1.0, negative_slope=0.0)
        forward(x, key_padding_mask, prev_logits=None) -> (y [B, T, D], logits [B, H, T, T])
    StandardAttention(embed_dim, num_heads)       vanilla attention, the baseline
        forward(x, key_padding_mask) -> y [B, T, D]

Causal (decoder) layers, with a key/value cache (docs/variants.md §5): each takes the new tokens
x [B, n, D], a mask over the cached and the new tokens [B, P+n] (or None) and the layer's past
state (a dict of tensors, None at the start), and returns a `CausalResult` (`output` [B, n, D],
`present` state; Evolving: `logits` for the next layer; GA-Net: the new tokens' `gates`):

    CausalStandardAttention(embed_dim, num_heads)
    CausalQVIAttention(embed_dim, num_heads, *, form="prefix"|"pairwise")   ("pooled" refused)
    CausalGateNetwork(embed_dim, *, kind="mlp"|"conv"|"lstm") -> (gate_logits [B, n], state)
    CausalGatedAttention(embed_dim, num_heads)       forward(x, mask, gate_logits, past)
    CausalEvolvingAttention(embed_dim, num_heads, *, alpha, beta, negative_slope, chain_start)
                                                     forward(x, mask, prev_logits, past)

They are the layers of the built-in models (one implementation per variant). Inside any model,
`attndeploy.export.export_model` writes each call of a QVI, gated or evolving layer as one node
of the `attndeploy` ONNX domain with its function (docs/ops.md), so any onnxruntime runs it.
"""

from __future__ import annotations

from attndeploy.variants.evolving.causal import CausalEvolvingAttention
from attndeploy.variants.evolving.layer import EvolvingAttention
from attndeploy.variants.ganet.causal import CausalGatedAttention, CausalGateNetwork
from attndeploy.variants.ganet.layer import (
    BudgetGatedAttention,
    GatedAttention,
    GateNetwork,
    soft_density,
)
from attndeploy.variants.qvi.causal import CausalQVIAttention
from attndeploy.variants.qvi.layer import QVIAttention
from attndeploy.variants.standard.causal import CausalStandardAttention
from attndeploy.variants.standard.layer import StandardAttention

__all__ = [
    "BudgetGatedAttention",
    "CausalEvolvingAttention",
    "CausalGateNetwork",
    "CausalGatedAttention",
    "CausalQVIAttention",
    "CausalStandardAttention",
    "EvolvingAttention",
    "GateNetwork",
    "GatedAttention",
    "QVIAttention",
    "StandardAttention",
    "soft_density",
]
