"""QVI's ops of the `attndeploy` ONNX set (docs/ops.md): one `op_*.py` per op, listed here."""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.qvi import op_pairwise, op_pooled, reference

OPS = (
    OpSpec("QVIAttention", reference.qvi_attention,
           torch.ops.attndeploy.qvi_attention.default, op_pooled.QVIAttention),
    OpSpec("QVIPairwiseAttention", reference.qvi_pairwise_attention,
           torch.ops.attndeploy.qvi_pairwise_attention.default,
           op_pairwise.QVIPairwiseAttention, torch_only=("chunk_size",)),
)
