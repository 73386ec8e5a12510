"""`attndeploy::SieveAttention`: the torch custom op, its fake, and its ONNX function body."""
# ruff: noqa: I001  (here `attndeploy.variants.sieve` does not exist; ruff sorts it as third-party)

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import ATTNDEPLOY, HardGates, MaskedSoftmax, ScaledScores, TFloat
from attndeploy.variants.sieve.reference import sieve_attention as reference


@torch.library.custom_op("attndeploy::sieve_attention", mutates_args=())
def sieve_attention(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor, gate_logits: Tensor,
    *, scale: float,
) -> Tensor:
    return reference(query, key, value, key_padding_mask, gate_logits, scale=scale)


@sieve_attention.register_fake
def _(query, key, value, key_padding_mask, gate_logits, *, scale):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def SieveAttention(
    query: TFloat, key: TFloat, value: TFloat, key_padding_mask: BOOL, gate_logits: TFloat,
    scale: float,
) -> TFloat:
    """SieveAttention(query, key, value, key_padding_mask, gate_logits; scale) -> output"""
    gates = HardGates(gate_logits, key_padding_mask)  # [B, T]
    scores = ScaledScores(query, key, scale=scale)  # [B, H, T, T]
    probs = MaskedSoftmax(scores, op.Unsqueeze(gates, [1, 2]))  # [B, H, T, T]
    output = op.MatMul(probs, value)  # [B, H, T, d]
    return output
