"""QVI's ops of the `attndeploy` ONNX set (docs/ops.md): one `op_*.py` per op, listed here.

`OPS` lists every op in docs/ops.md order: the encoder forms, then the causal (decoder) ones,
which `CAUSAL_OPS` also names (tests/variants/test_causal.py holds each to a reference case).
"""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.qvi import (
    op_causal_pairwise,
    op_pairwise,
    op_pooled,
    op_prefix,
    reference,
)

CAUSAL_OPS = (
    OpSpec("QVIPrefixAttention", reference.qvi_prefix_attention,
           torch.ops.attndeploy.qvi_prefix_attention.default, op_prefix.QVIPrefixAttention),
    OpSpec("QVICausalPairwiseAttention", reference.qvi_causal_pairwise_attention,
           torch.ops.attndeploy.qvi_causal_pairwise_attention.default,
           op_causal_pairwise.QVICausalPairwiseAttention, torch_only=("chunk_size",)),
)

OPS = (
    OpSpec("QVIAttention", reference.qvi_attention,
           torch.ops.attndeploy.qvi_attention.default, op_pooled.QVIAttention),
    OpSpec("QVIPairwiseAttention", reference.qvi_pairwise_attention,
           torch.ops.attndeploy.qvi_pairwise_attention.default,
           op_pairwise.QVIPairwiseAttention, torch_only=("chunk_size",)),
    *CAUSAL_OPS,
)
