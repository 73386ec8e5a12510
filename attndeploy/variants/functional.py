"""Functional reference implementations of the `attndeploy` ONNX op set (docs/ops.md, version 1).

Letters: b batch, h heads, i query position, j key position, d/e head features.
One function per op, same argument order and meaning as the op, snake_case names. The attention
layers call these (through `attndeploy.variants._common.call_op`), and the ONNX function bodies
of the exporter are tested against them: they are the single source of truth for the maths.

Conventions (docs/ops.md): tensors are `[B, H, T, d]`; `key_padding_mask` is bool `[B, T]` with
True = real token; weights are per head `[H, d_in, d_out]`, applied as `x @ W`; masked softmax adds
the most negative finite value of the dtype (never -inf) and runs in fp32; no output is NaN for
finite input, also for rows without any real token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = [
    "evolving_attention",
    "evolving_attention_start",
    "gated_attention",
    "gated_attention_pooling",
    "hard_gates",
    "masked_softmax",
    "qvi_attention",
    "qvi_pairwise_attention",
]


# ----------------------------------------------------------------------------- helpers


def resolve_scale(query: Tensor, scale: float | None) -> float:
    """The factor on Q·Kᵀ: `scale` if given, else 1/sqrt(d)."""
    return float(scale) if scale is not None else query.shape[-1] ** -0.5


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where `allowed`, the most negative finite value of `dtype` elsewhere (same shape)."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    most_negative = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, most_negative)


def masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """softmax over the last axis of `scores + M`, in fp32, cast back to the scores' dtype.

    `allowed` broadcasts against `scores` (bool, True = may be attended).
    """
    scores32 = scores.float()
    return torch.softmax(scores32 + additive_mask(allowed, torch.float32), dim=-1).to(scores.dtype)


def head_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """Per-head affine map `x @ W[h] + b[h]`: x [B,H,T,d], W [H,d,e], b [H,e] -> [B,H,T,e]."""
    y = torch.einsum("bhtd,hde->bhte", x, weight)
    if bias is not None:
        y = y + bias[:, None, :]  # [H, 1, e] broadcast over B and T
    return y


def _scores(query: Tensor, key: Tensor, scale: float) -> Tensor:
    return scale * (query @ key.transpose(-2, -1))  # [B, H, Tq, Tk]


def _key_allowed(key_padding_mask: Tensor) -> Tensor:
    return key_padding_mask[:, None, None, :]  # [B, 1, 1, Tk]


def _pair_allowed(key_padding_mask: Tensor) -> Tensor:
    """True where both the query row and the key column are real: [B, 1, T, T]."""
    return key_padding_mask[:, None, :, None] & key_padding_mask[:, None, None, :]


def _zero_pads(x: Tensor, key_padding_mask: Tensor) -> Tensor:
    """Z(X): rows of padded queries and columns of padded keys set to 0 (with where)."""
    return torch.where(_pair_allowed(key_padding_mask), x, torch.zeros((), dtype=x.dtype))


# ----------------------------------------------------------------------------- QVI


def qvi_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    u_weight: Tensor,
    u_bias: Tensor,
    w_weight: Tensor,
    w_bias: Tensor,
    gate_value_weight: Tensor,
    gate_interaction_weight: Tensor,
    gate_bias: Tensor,
    pool_weight: Tensor,
    *,
    scale: float | None = None,
) -> Tensor:
    """QVIAttention(query, key, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias,
    gate_value_weight, gate_interaction_weight, gate_bias, pool_weight; scale) -> output

    Pooled form: one attention-pooled summary query per sequence and head builds query-aware
    values, mixed with the values through a learned gate; the Q-K attention weights are vanilla.
    """
    scale = resolve_scale(query, scale)
    pool_scores = scale * torch.einsum("bhtd,hd->bht", query, pool_weight)  # [B, H, T]
    beta = masked_softmax(pool_scores, key_padding_mask[:, None, :])  # [B, H, T]
    q_bar = torch.einsum("bht,bhtd->bhd", beta, query)[:, :, None, :]  # [B, H, 1, d]
    v_hat = head_linear(q_bar, u_weight, u_bias) * head_linear(value, w_weight, w_bias)  # [B,H,T,d]
    gamma = torch.sigmoid(
        head_linear(value, gate_value_weight)
        + head_linear(v_hat, gate_interaction_weight)
        + gate_bias[:, None, :]
    )  # [B, H, T, d]
    v_tilde = gamma * value + (1 - gamma) * v_hat
    probs = masked_softmax(_scores(query, key, scale), _key_allowed(key_padding_mask))
    return probs @ v_tilde  # [B, H, T, d]


def _pairwise_block(
    probs: Tensor, u: Tensor, w: Tensor, value: Tensor, gate_from_value: Tensor,
    gate_interaction_weight: Tensor,
) -> Tensor:
    """Output rows for one query block: probs [B,H,c,Tk], u [B,H,c,d] -> [B,H,c,d]."""
    v_hat = u[:, :, :, None, :] * w[:, :, None, :, :]  # [B, H, c, Tk, d]
    gamma = torch.sigmoid(
        gate_from_value[:, :, None, :, :]
        + torch.einsum("bhijd,hde->bhije", v_hat, gate_interaction_weight)
    )  # [B, H, c, Tk, d]
    v_tilde = gamma * value[:, :, None, :, :] + (1 - gamma) * v_hat  # [B, H, c, Tk, d]
    return torch.einsum("bhij,bhijd->bhid", probs, v_tilde)  # [B, H, c, d]


def qvi_pairwise_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    u_weight: Tensor,
    u_bias: Tensor,
    w_weight: Tensor,
    w_bias: Tensor,
    gate_value_weight: Tensor,
    gate_interaction_weight: Tensor,
    gate_bias: Tensor,
    *,
    scale: float | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """QVIPairwiseAttention(query, key, value, key_padding_mask, u_weight, u_bias, w_weight,
    w_bias, gate_value_weight, gate_interaction_weight, gate_bias; scale) -> output

    Exact per-pair form: Ṽ_ij = Γ_ij ⊙ v_j + (1 − Γ_ij) ⊙ (u_i ⊙ w_j), o_i = Σ_j P_ij Ṽ_ij.
    Evaluated in query blocks of `chunk_size` rows (all at once if None) so memory stays
    O(B·H·c·T·d); with autograd on, each block is recomputed in backward (checkpointing).
    The result does not depend on the block size.
    """
    scale = resolve_scale(query, scale)
    probs = masked_softmax(_scores(query, key, scale), _key_allowed(key_padding_mask))
    u = head_linear(query, u_weight, u_bias)  # [B, H, Tq, d]
    w = head_linear(value, w_weight, w_bias)  # [B, H, Tk, d]
    gate_from_value = head_linear(value, gate_value_weight, gate_bias)  # [B, H, Tk, d]
    t_q = query.shape[2]
    block = t_q if chunk_size is None else max(1, int(chunk_size))
    outputs = []
    for start in range(0, t_q, block):
        rows = slice(start, start + block)
        args = (probs[:, :, rows], u[:, :, rows], w, value, gate_from_value,
                gate_interaction_weight)
        if torch.is_grad_enabled() and block < t_q:
            outputs.append(checkpoint(_pairwise_block, *args, use_reentrant=False))
        else:
            outputs.append(_pairwise_block(*args))
    return torch.cat(outputs, dim=2)  # [B, H, Tq, d]


# ----------------------------------------------------------------------------- GA-Net


def hard_gates(gate_logits: Tensor, key_padding_mask: Tensor) -> Tensor:
    """Hard 0/1 gates from the LOGITS (never from sigmoid): bool [B, T].

    open = (logit > 0) AND real; in a row with no open key, the real key with the largest logit
    opens (ties: smallest index); a row with no real key at all opens position 0.
    """
    is_open = (gate_logits > 0) & key_padding_mask  # [B, T]
    lowest = torch.full((), torch.finfo(gate_logits.dtype).min, dtype=gate_logits.dtype)
    candidates = torch.where(key_padding_mask, gate_logits, lowest)
    rescue_at = torch.argmax(candidates, dim=-1)  # first maximum; 0 for a row without real keys
    rescue_at = torch.where(key_padding_mask.any(-1), rescue_at, torch.zeros_like(rescue_at))
    positions = torch.arange(gate_logits.shape[-1], device=gate_logits.device)  # [T]
    rescued = (positions[None, :] == rescue_at[:, None]) & ~is_open.any(-1, keepdim=True)
    return is_open | rescued


def gated_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    gate_logits: Tensor,
    *,
    scale: float | None = None,
    gather_open_keys: bool = False,
) -> tuple[Tensor, Tensor]:
    """GatedAttention(query, key, value, key_padding_mask, gate_logits; scale) -> output, gates

    Hard-gated attention: softmax over the open keys only (closed keys weigh exactly 0).
    `gather_open_keys` evaluates it by gathering the open keys (N = the batch's largest open
    count) instead of masking the full score matrix; both give the same result.
    """
    scale = resolve_scale(query, scale)
    gates = hard_gates(gate_logits, key_padding_mask)  # [B, Tk]
    if not gather_open_keys:
        probs = masked_softmax(_scores(query, key, scale), _key_allowed(gates))
        return probs @ value, gates
    batch, heads, t_k, dim = key.shape
    n_open = int(gates.sum(-1).max())  # N >= 1 thanks to the rescue
    positions = torch.arange(t_k, device=gates.device)
    order_key = gates.long() * (2 * t_k) - positions[None, :]  # open first, then by position
    slots = torch.topk(order_key, n_open, dim=-1).indices  # [B, N]
    slot_ok = torch.gather(gates, 1, slots)  # [B, N]
    gather_index = slots[:, None, :, None].expand(batch, heads, n_open, dim)  # [B, H, N, d]
    open_keys = torch.gather(key, 2, gather_index)  # [B, H, N, d]
    open_values = torch.gather(value, 2, gather_index)  # [B, H, N, d]
    probs = masked_softmax(_scores(query, open_keys, scale), slot_ok[:, None, None, :])
    return probs @ open_values, gates  # [B, H, Tq, d]


def gated_attention_pooling(
    values: Tensor, scores: Tensor, key_padding_mask: Tensor, gate_logits: Tensor
) -> tuple[Tensor, Tensor]:
    """GatedAttentionPooling(values, scores, key_padding_mask, gate_logits) -> context, gates

    alpha = softmax over open positions of scores; context = Σ_t alpha_t values_t  [B, D].
    """
    gates = hard_gates(gate_logits, key_padding_mask)  # [B, T]
    alpha = masked_softmax(scores, gates)  # [B, T]
    return torch.einsum("bt,btd->bd", alpha, values), gates


# ----------------------------------------------------------------------------- Evolving


def evolving_attention_start(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor,
    *, scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """EvolvingAttentionStart(query, key, value, key_padding_mask; scale) -> output, logits

    Vanilla attention that also hands on its zero-padded logits S = Z(scale · Q Kᵀ).
    """
    scale = resolve_scale(query, scale)
    logits = _zero_pads(_scores(query, key, scale), key_padding_mask)  # [B, H, T, T]
    probs = masked_softmax(logits, _key_allowed(key_padding_mask))
    return probs @ value, logits


def evolving_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    prev_logits: Tensor,
    conv_weight: Tensor,
    conv_bias: Tensor,
    *,
    scale: float | None = None,
    alpha: float,
    beta: float,
    negative_slope: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """EvolvingAttention(query, key, value, key_padding_mask, prev_logits, conv_weight, conv_bias;
    scale, alpha, beta, negative_slope) -> output, logits

    A_in = α·Z(prev) + (1−α)·Z(S);  C = LeakyReLU(Conv3x3(A_in));  A = Z(β·C + (1−β)·A_in);
    output = softmax_k(A + M) V;  logits = A. The mask enters only the final softmax.
    """
    scale = resolve_scale(query, scale)
    current = _zero_pads(_scores(query, key, scale), key_padding_mask)  # [B, H, T, T]
    mixed = alpha * _zero_pads(prev_logits, key_padding_mask) + (1 - alpha) * current
    conv = F.leaky_relu(F.conv2d(mixed, conv_weight, conv_bias, padding=1), negative_slope)
    logits = _zero_pads(beta * conv + (1 - beta) * mixed, key_padding_mask)  # [B, H, T, T]
    probs = masked_softmax(logits, _key_allowed(key_padding_mask))
    return probs @ value, logits
