"""Evolving attention's ops of the `attndeploy` ONNX set (docs/ops.md): one `op_*.py` per op."""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.evolving import op_evolving, op_start, reference

OPS = (
    OpSpec("EvolvingAttentionStart", reference.evolving_attention_start,
           torch.ops.attndeploy.evolving_attention_start.default,
           op_start.EvolvingAttentionStart),
    OpSpec("EvolvingAttention", reference.evolving_attention,
           torch.ops.attndeploy.evolving_attention.default, op_evolving.EvolvingAttention),
)
