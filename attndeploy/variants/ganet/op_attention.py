"""`attndeploy::GatedAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, i query position, j key position, n gathered key slot, d features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL, INT64
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    HardGates,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
)
from attndeploy.variants.ganet import reference


@torch.library.custom_op("attndeploy::gated_attention", mutates_args=())
def gated_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    gate_logits: Tensor,
    *,
    scale: float,
) -> tuple[Tensor, Tensor]:
    """Eager: `functional.gated_attention`. Export: one `attndeploy::GatedAttention` node."""
    return reference.gated_attention(
        query, key, value, key_padding_mask, gate_logits, scale=scale
    )


@gated_attention.register_fake
def _(query, key, value, key_padding_mask, gate_logits, *, scale):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, Tq, d]
    return output, key_padding_mask.new_empty(key_padding_mask.shape)  # gates [B, Tk]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def GatedAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    gate_logits: TFloat,
    scale: float,
) -> tuple[TFloat, BOOL]:
    """GatedAttention(query, key, value, key_padding_mask, gate_logits; scale: float)
    -> output, gates

    GA-Net hard-gated attention (docs/ops.md); closed keys are skipped physically: the open keys are
    gathered (N = the batch's largest open count, a run-time TopK k) and the softmax runs over
    the N slots. Equals the masked form softmax(S + M_gates) @ V.

        gates   = (gate_logits > 0) AND key_padding_mask, plus the rescue     [B,Tk]
        n_b     = Σ_j gates_bj;   N = max_b n_b (>= 1 by the rescue)
        idx     = TopK_N(gates · 2Tk - j)        open positions first, in order [B,N]
        slot_ok = gates gathered at idx                                        [B,N]
        K_o,V_o = K, V gathered along Tk at idx                                [B,H,N,d]
        out     = softmax_n(scale · Q K_oᵀ + M_slot) @ V_o                     [B,H,Tq,d]

    PyTorch: `attndeploy.variants.functional.gated_attention` (either gather_open_keys).
    """
    # Everything up to `slots` reads only gate_logits and key_padding_mask (Tk included), so in
    # a model whose layers share one gate vector onnxruntime's common-subexpression elimination
    # computes the gates, N and the slots once for all layers and the pooling.
    gates = HardGates(gate_logits, key_padding_mask)  # [B, Tk]
    gates_int = op.Cast(gates, to=INT64.dtype)  # [B, Tk]
    open_count = op.ReduceSum(gates_int, [1], keepdims=0)  # [B]
    slot_count = op.ReduceMax(open_count, [0], keepdims=1)  # [1]: N

    num_keys = op.Shape(gate_logits, start=1, end=2)  # [1]: Tk
    positions = op.Range(
        op.Constant(value_int=0), op.Squeeze(num_keys, [0]), op.Constant(value_int=1)
    )  # [Tk]
    open_first = op.Mul(gates_int, op.Mul(op.Constant(value_int=2), num_keys))  # [B, Tk]: 2Tk or 0
    order = op.Sub(open_first, op.Unsqueeze(positions, [0]))  # [B, Tk] - [1, Tk]: all distinct
    _, slots = op.TopK(order, slot_count, axis=1, largest=1, sorted=1)  # [B, N]
    slot_ok = op.GatherElements(gates, slots, axis=1)  # [B, N]

    # Gather whole rows: GatherND over the Tk axis with (b, h) as batch dims, one [B, H, N, 1]
    # index for keys and values (GatherElements would need a [B, H, N, d] index per tensor).
    row_index = op.Expand(
        op.Unsqueeze(slots, [1, 3]),
        op.Concat(op.Shape(key, start=0, end=2), slot_count, op.Constant(value_ints=[1]), axis=0),
    )  # [B, H, N, 1]
    open_keys = op.GatherND(key, row_index, batch_dims=2)  # [B, H, N, d]
    open_values = op.GatherND(value, row_index, batch_dims=2)  # [B, H, N, d_v]

    scores = ScaledScores(query, open_keys, scale=scale)  # [B, H, Tq, N]
    probs = MaskedSoftmax(scores, op.Unsqueeze(slot_ok, [1, 2]))  # [B, H, Tq, N]
    output = op.MatMul(probs, open_values)  # [B, H, Tq, d_v]
    return output, gates
