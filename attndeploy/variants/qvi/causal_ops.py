"""QVI's causal (decoder) ops: listed apart from `ops.OPS` until the op set's docs and op tests
take them in (docs/ops.md; issue #49)."""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.qvi import op_causal_pairwise, op_prefix, reference

CAUSAL_OPS = (
    OpSpec("QVIPrefixAttention", reference.qvi_prefix_attention,
           torch.ops.attndeploy.qvi_prefix_attention.default, op_prefix.QVIPrefixAttention),
    OpSpec("QVICausalPairwiseAttention", reference.qvi_causal_pairwise_attention,
           torch.ops.attndeploy.qvi_causal_pairwise_attention.default,
           op_causal_pairwise.QVICausalPairwiseAttention, torch_only=("chunk_size",)),
)
