"""Evolving attention's causal (decoder) ops: listed apart from `ops.OPS` until the op set's
docs and op tests take them in (docs/ops.md; issue #49)."""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.evolving import op_causal, op_causal_start, reference

CAUSAL_OPS = (
    OpSpec("CausalEvolvingAttentionStart", reference.causal_evolving_attention_start,
           torch.ops.attndeploy.causal_evolving_attention_start.default,
           op_causal_start.CausalEvolvingAttentionStart),
    OpSpec("CausalEvolvingAttention", reference.causal_evolving_attention,
           torch.ops.attndeploy.causal_evolving_attention.default,
           op_causal.CausalEvolvingAttention),
)
