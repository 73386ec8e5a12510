"""GA-Net's ops of the `attndeploy` ONNX set (docs/ops.md): one `op_*.py` per op, listed here."""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.ganet import op_attention, op_pooling, reference

OPS = (
    OpSpec("GatedAttention", reference.gated_attention,
           torch.ops.attndeploy.gated_attention.default, op_attention.GatedAttention,
           torch_only=("gather_open_keys",)),
    OpSpec("GatedAttentionPooling", reference.gated_attention_pooling,
           torch.ops.attndeploy.gated_attention_pooling.default,
           op_pooling.GatedAttentionPooling),
)
