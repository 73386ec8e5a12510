"""`attndeploy::CausalEvolvingAttention`: the torch custom op, its fake, and its ONNX body.

Letters: b batch, h heads (the conv's channels), i query position (the last Tq keys), j key
position, d features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    CausalAllowed,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
    ZeroCausal,
)
from attndeploy.variants.evolving import reference


@torch.library.custom_op("attndeploy::causal_evolving_attention", mutates_args=())
def causal_evolving_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    prev_logits: Tensor,
    past_rows: Tensor,
    conv_weight: Tensor,
    conv_bias: Tensor,
    *,
    scale: float,
    alpha: float,
    beta: float,
    negative_slope: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Eager: `evolving.reference.causal_evolving_attention`. Export: one node."""
    output, logits, rows = reference.causal_evolving_attention(
        query, key, value, key_padding_mask, prev_logits, past_rows, conv_weight, conv_bias,
        scale=scale, alpha=alpha, beta=beta, negative_slope=negative_slope,
    )
    return output, logits, rows.clone()  # rows is a view into the stacked maps: own it


@causal_evolving_attention.register_fake
def _(query, key, value, key_padding_mask, prev_logits, past_rows, conv_weight, conv_bias,
      **_attrs):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, Tq, d]
    return output, prev_logits.new_empty(prev_logits.shape), past_rows.new_empty(past_rows.shape)


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def CausalEvolvingAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    prev_logits: TFloat,
    past_rows: TFloat,
    conv_weight: TFloat,
    conv_bias: TFloat,
    scale: float,
    alpha: float,
    beta: float,
    negative_slope: float,
) -> tuple[TFloat, TFloat, TFloat]:
    """CausalEvolvingAttention(query, key, value, key_padding_mask, prev_logits, past_rows,
    conv_weight, conv_bias; scale: float, alpha: float, beta: float, negative_slope: float)
    -> output, logits, rows

    Evolving attention under the causal rule (docs/variants.md §5). query: T [B,H,Tq,d], the
    last Tq of the Tk keys; prev_logits: A^{l-1}'s rows of the queries T [B,H,Tq,Tk]; past_rows:
    the last two rows of this layer's mixed map before the first query T [B,H,2,Tk] (zeros at
    the start and in columns not seen then).

        Z_c    = padded rows and columns and keys after their query (j > i) set to 0
        A_in   = Z_c(alpha · prev_logits + (1 - alpha) · scale · Q Kᵀ)
        C      = LeakyRelu_{negative_slope}(Conv2d([past_rows; A_in], conv_weight, conv_bias,
                 pads: 0 rows, 1 column each side))        row-causal 3×3: rows i-2..i
        A      = Z_c(beta · C + (1 - beta) · A_in)
        out    = softmax_j(A + M_causal) @ V                                    [B,H,Tq,d]
        logits = A                                                              [B,H,Tq,Tk]
        rows   = the last two rows of [past_rows; A_in]  (the next step's past_rows)

    PyTorch: `attndeploy.variants.evolving.reference.causal_evolving_attention`.
    """
    one = op.CastLike(1.0, query)
    alpha_t = op.CastLike(alpha, query)
    beta_t = op.CastLike(beta, query)
    current = ScaledScores(query, key, scale=scale)  # [B, H, Tq, Tk], not yet zeroed
    # Z_c is a Where per element: alpha·Z_c(prev) + (1-alpha)·Z_c(S) = Z_c(alpha·prev +
    # (1-alpha)·S) exactly (as EvolvingAttention's body).
    mixed = ZeroCausal(
        op.Add(op.Mul(alpha_t, prev_logits), op.Mul(op.Sub(one, alpha_t), current)),
        key_padding_mask,
    )  # [B, H, Tq, Tk]: A_in
    stacked = op.Concat(past_rows, mixed, axis=2)  # [B, H, 2+Tq, Tk]
    conv = op.Conv(
        stacked, conv_weight, conv_bias, kernel_shape=[3, 3], pads=[0, 1, 0, 1], strides=[1, 1]
    )  # [B, H, Tq, Tk]: no row padding (past_rows are the rows above), columns centred
    # LeakyRelu without an attribute reference, as EvolvingAttention's body (onnx.reference
    # rejects `alpha=@negative_slope` inside a function): max(x, slope·x) for slope <= 1.
    is_relu = op.Equal(op.Constant(value_float=negative_slope), op.Constant(value_float=0.0))
    if is_relu:
        activated = op.Relu(conv)  # [B, H, Tq, Tk]: C
    else:
        scaled = op.Mul(conv, op.CastLike(negative_slope, conv))  # [B, H, Tq, Tk]
        at_most_one = op.LessOrEqual(
            op.Constant(value_float=negative_slope), op.Constant(value_float=1.0)
        )
        if at_most_one:
            activated = op.Max(conv, scaled)
        else:
            activated = op.Min(conv, scaled)
    conv_only = op.Equal(op.Constant(value_float=beta), op.Constant(value_float=1.0))
    if conv_only:
        combined = op.Identity(activated)
    else:
        combined = op.Add(op.Mul(beta_t, activated), op.Mul(op.Sub(one, beta_t), mixed))
    logits = ZeroCausal(combined, key_padding_mask)  # [B, H, Tq, Tk]: A
    probs = MaskedSoftmax(logits, CausalAllowed(query, key_padding_mask))  # [B, H, Tq, Tk]
    output = op.MatMul(probs, value)  # [B, H, Tq, d]
    rows = op.Slice(
        stacked, op.Constant(value_ints=[-2]), op.Constant(value_ints=[2**62]),
        op.Constant(value_ints=[2]),
    )  # [B, H, 2, Tk]
    return output, logits, rows
