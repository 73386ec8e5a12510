"""GA-Net's causal (decoder) op: listed apart from `ops.OPS` until the op set's docs and op tests
take it in (docs/ops.md; issue #49)."""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.ganet import op_causal, reference

CAUSAL_OPS = (
    OpSpec("CausalGatedAttention", reference.causal_gated_attention,
           torch.ops.attndeploy.causal_gated_attention.default, op_causal.CausalGatedAttention),
)
