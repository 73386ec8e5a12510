"""Functional reference implementations of the `attndeploy` ONNX op set (docs/ops.md, version 1).

Letters: b batch, h heads, i query position, j key position, d/e head features.
One function per op, same argument order and meaning as the op, snake_case names. The attention
layers call these (through `attndeploy.variants.api.call_op`), and the ONNX function bodies
of the exporter are tested against them: they are the single source of truth for the maths.
Each lives in its variant's package (`variants/<name>/reference.py`), what they share in
`variants/_reference.py`; this module is their stable public facade.

Conventions (docs/ops.md): tensors are `[B, H, T, d]`; `key_padding_mask` is bool `[B, T]` with
True = real token; weights are per head `[H, d_in, d_out]`, applied as `x @ W`; masked softmax adds
the most negative finite value of the dtype (never -inf) and runs in fp32; no output is NaN for
finite input, also for rows without any real token.

The causal (decoder) references (`causal_*`, `qvi_prefix_attention`,
`qvi_causal_pairwise_attention`; docs/variants.md §5) take queries that are the last Tq of the
Tk keys: a whole sequence (Tq = Tk) or a decode step against a cache.
"""

from __future__ import annotations

from attndeploy.variants._reference import (  # noqa: F401  (helpers the op code and tests use)
    additive_mask,
    hard_gates,
    head_linear,
    masked_softmax,
    resolve_scale,
)
from attndeploy.variants.evolving.reference import (
    causal_evolving_attention,
    causal_evolving_attention_start,
    evolving_attention,
    evolving_attention_start,
)
from attndeploy.variants.ganet.reference import (
    budget_gated_attention,
    causal_gated_attention,
    gated_attention,
    gated_attention_pooling,
)
from attndeploy.variants.qvi.reference import (
    qvi_attention,
    qvi_causal_pairwise_attention,
    qvi_pairwise_attention,
    qvi_prefix_attention,
)

__all__ = [
    "budget_gated_attention",
    "causal_evolving_attention",
    "causal_evolving_attention_start",
    "causal_gated_attention",
    "evolving_attention",
    "evolving_attention_start",
    "gated_attention",
    "gated_attention_pooling",
    "hard_gates",
    "masked_softmax",
    "qvi_attention",
    "qvi_causal_pairwise_attention",
    "qvi_pairwise_attention",
    "qvi_prefix_attention",
]
