"""GA-Net's ops of the `attndeploy` ONNX set (docs/ops.md): one `op_*.py` per op, listed here.

`OPS` lists every op in docs/ops.md order: the encoder ops, then the causal (decoder) one,
which `CAUSAL_OPS` also names (tests/variants/test_causal.py holds it to a reference case).
"""

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.ganet import op_attention, op_budget, op_causal, op_pooling, reference

CAUSAL_OPS = (
    OpSpec("CausalGatedAttention", reference.causal_gated_attention,
           torch.ops.attndeploy.causal_gated_attention.default, op_causal.CausalGatedAttention),
)

OPS = (
    OpSpec("GatedAttention", reference.gated_attention,
           torch.ops.attndeploy.gated_attention.default, op_attention.GatedAttention,
           torch_only=("gather_open_keys",)),
    OpSpec("GatedAttentionPooling", reference.gated_attention_pooling,
           torch.ops.attndeploy.gated_attention_pooling.default,
           op_pooling.GatedAttentionPooling),
    OpSpec("BudgetGatedAttention", reference.budget_gated_attention,
           torch.ops.attndeploy.budget_gated_attention.default,
           op_budget.BudgetGatedAttention),
    *CAUSAL_OPS,
)
