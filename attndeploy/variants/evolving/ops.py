"""Evolving attention's ops of the `attndeploy` ONNX set (docs/ops.md): one `op_*.py` per op.

`OPS` lists every op in docs/ops.md order: the encoder chain's two, then the causal (decoder)
chain's two, which `CAUSAL_OPS` also names (tests/variants/test_causal.py holds each to a
reference case).
"""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.evolving import (
    op_causal,
    op_causal_start,
    op_evolving,
    op_start,
    reference,
)

CAUSAL_OPS = (
    OpSpec("CausalEvolvingAttentionStart", reference.causal_evolving_attention_start,
           torch.ops.attndeploy.causal_evolving_attention_start.default,
           op_causal_start.CausalEvolvingAttentionStart),
    OpSpec("CausalEvolvingAttention", reference.causal_evolving_attention,
           torch.ops.attndeploy.causal_evolving_attention.default,
           op_causal.CausalEvolvingAttention),
)

OPS = (
    OpSpec("EvolvingAttentionStart", reference.evolving_attention_start,
           torch.ops.attndeploy.evolving_attention_start.default,
           op_start.EvolvingAttentionStart),
    OpSpec("EvolvingAttention", reference.evolving_attention,
           torch.ops.attndeploy.evolving_attention.default, op_evolving.EvolvingAttention),
    *CAUSAL_OPS,
)
