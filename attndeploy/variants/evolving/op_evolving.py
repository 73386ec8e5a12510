"""`attndeploy::EvolvingAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads (the conv's channels), i query position, j key position, d features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
    ZeroPads,
)
from attndeploy.variants.evolving import reference


@torch.library.custom_op("attndeploy::evolving_attention", mutates_args=())
def evolving_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    prev_logits: Tensor,
    conv_weight: Tensor,
    conv_bias: Tensor,
    *,
    scale: float,
    alpha: float,
    beta: float,
    negative_slope: float,
) -> tuple[Tensor, Tensor]:
    """Eager: `functional.evolving_attention`. Export: one `attndeploy::EvolvingAttention`."""
    return reference.evolving_attention(
        query, key, value, key_padding_mask, prev_logits, conv_weight, conv_bias,
        scale=scale, alpha=alpha, beta=beta, negative_slope=negative_slope,
    )


@evolving_attention.register_fake
def _(query, key, value, key_padding_mask, prev_logits, conv_weight, conv_bias, **_attrs):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d]
    return output, prev_logits.new_empty(prev_logits.shape)  # logits [B, H, T, T]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def EvolvingAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    prev_logits: TFloat,
    conv_weight: TFloat,
    conv_bias: TFloat,
    scale: float,
    alpha: float,
    beta: float,
    negative_slope: float,
) -> tuple[TFloat, TFloat]:
    """EvolvingAttention(query, key, value, key_padding_mask, prev_logits, conv_weight, conv_bias;
    scale: float, alpha: float, beta: float, negative_slope: float) -> output, logits

    Residual 3×3 convolution over the previous layer's logits, heads as channels (docs/ops.md).
    prev_logits: T [B,H,T,T]; conv_weight: T [H,H,3,3]; conv_bias: T [H].

        Z      = pad-zero: rows of padded queries and columns of padded keys set to 0
        S      = Z(scale · Q Kᵀ)
        A_in   = alpha · Z(prev_logits) + (1 - alpha) · S
        C      = LeakyRelu_{negative_slope}(Conv2d(A_in, conv_weight, conv_bias, pad 1))
        A      = Z(beta · C + (1 - beta) · A_in)
        out    = softmax_k(A + M) @ V          the mask enters only here    [B,H,T,d]
        logits = A                                                          [B,H,T,T]

    PyTorch: `attndeploy.variants.functional.evolving_attention`.
    """
    one = op.CastLike(1.0, query)
    alpha_t = op.CastLike(alpha, query)
    beta_t = op.CastLike(beta, query)
    # Z is a Where per element, so alpha·Z(prev) + (1-alpha)·Z(S) = Z(alpha·prev + (1-alpha)·S)
    # exactly (valid entries: the same two products and sum; padded ones: +0 either way). One
    # Where instead of two, and (1-alpha)·scale folds into one FusedMatMul in onnxruntime.
    current = ScaledScores(query, key, scale=scale)  # [B, H, T, T], not yet zeroed
    mixed = ZeroPads(
        op.Add(op.Mul(alpha_t, prev_logits), op.Mul(op.Sub(one, alpha_t), current)),
        key_padding_mask,
    )  # [B, H, T, T]: A_in
    conv = op.Conv(
        mixed, conv_weight, conv_bias, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]
    )  # [B, H, T, T]: channels = heads
    # C = LeakyRelu_{negative_slope}(conv), written without an attribute reference on
    # LeakyRelu: onnx.reference rejects `alpha=@negative_slope` inside a function (onnx 1.23:
    # "OpRunUnaryNum.run() got an unexpected keyword argument 'linked_attributes'"). The slope
    # enters as a tensor in T, as LeakyRelu's own function body casts its alpha. slope·x lies
    # between x and 0, so LeakyRelu(x) = max(x, slope·x) for slope <= 1 and min(x, slope·x)
    # for slope >= 1, exactly (the same product). The conditions are constants once the
    # attribute is bound: onnxruntime keeps only the taken branch.
    is_relu = op.Equal(op.Constant(value_float=negative_slope), op.Constant(value_float=0.0))
    if is_relu:  # the default; onnxruntime fuses the Relu into the Conv
        activated = op.Relu(conv)  # [B, H, T, T]: C
    else:
        scaled = op.Mul(conv, op.CastLike(negative_slope, conv))  # [B, H, T, T]
        at_most_one = op.LessOrEqual(
            op.Constant(value_float=negative_slope), op.Constant(value_float=1.0)
        )
        if at_most_one:
            activated = op.Max(conv, scaled)
        else:
            activated = op.Min(conv, scaled)
    # beta = 1 (the default) is the conv branch alone: 1·C + 0·A_in = C for finite A_in. The
    # condition is a constant once the attribute is bound: onnxruntime's constant folding keeps
    # only the taken branch (two full [B, H, T, T] passes fewer) before any other pass sees the
    # graph; other runtimes pick it at run time. Like the slope's, the condition reads no
    # tensor, so that onnxruntime can fold it (the one kind of If whose branches read what
    # its condition does not depend on; ops/_common.py).
    conv_only = op.Equal(op.Constant(value_float=beta), op.Constant(value_float=1.0))
    if conv_only:
        combined = op.Identity(activated)
    else:
        combined = op.Add(op.Mul(beta_t, activated), op.Mul(op.Sub(one, beta_t), mixed))
    logits = ZeroPads(combined, key_padding_mask)  # [B, H, T, T]
    probs = MaskedSoftmax(logits, op.Unsqueeze(key_padding_mask, [1, 2]))  # [B, H, T, T]
    output = op.MatMul(probs, value)  # [B, H, T, d]
    return output, logits
