"""QVI's op references (docs/variants.md §2): `QVIAttention`, `QVIPairwiseAttention`.

Letters: b batch, h heads, i query position, j key position, d/e head features. Conventions as in
`attndeploy.variants.functional` (docs/ops.md), which re-exports these as the stable functional
API; the layer and the op run them (`call_op`), and the ONNX bodies are tested against them.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from attndeploy.variants._causal import causal_allowed
from attndeploy.variants._reference import (
    _key_allowed,
    _scores,
    head_linear,
    masked_softmax,
    resolve_scale,
)


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
    v_tilde = qvi_pooled_values(
        query, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
        gate_interaction_weight, gate_bias, pool_weight, scale=scale,
    )  # [B, H, T, d]
    probs = masked_softmax(_scores(query, key, scale), _key_allowed(key_padding_mask))
    return probs @ v_tilde  # [B, H, T, d]


def qvi_pooled_values(
    query: Tensor, value: Tensor, key_padding_mask: Tensor, u_weight: Tensor, u_bias: Tensor,
    w_weight: Tensor, w_bias: Tensor, gate_value_weight: Tensor,
    gate_interaction_weight: Tensor, gate_bias: Tensor, pool_weight: Tensor, *,
    scale: float | None = None,
) -> Tensor:
    """The pooled form's query-aware values Ṽ [B,H,T,d] of queries and values [B,H,T,d]: the
    real queries (key_padding_mask [B,T]) are attention-pooled into one q̄ per sequence and
    head, V̂ = Lin(q̄) ⊙ Lin(V), Ṽ = Γ ⊙ V + (1 − Γ) ⊙ V̂."""
    scale = resolve_scale(query, scale)
    pool_scores = scale * torch.einsum("bhtd,hd->bht", query, pool_weight)  # [B, H, T]
    beta = masked_softmax(pool_scores, key_padding_mask[:, None, :])  # [B, H, T]
    q_bar = torch.einsum("bht,bhtd->bhd", beta, query)[:, :, None, :]  # [B, H, 1, d]
    return query_aware_values(
        q_bar, value, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
        gate_interaction_weight, gate_bias,
    )  # [B, H, T, d]


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
    return _pairwise_output(
        probs, query, value, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
        gate_interaction_weight, gate_bias, chunk_size,
    )


def _pairwise_output(
    probs: Tensor, query: Tensor, value: Tensor, u_weight: Tensor, u_bias: Tensor,
    w_weight: Tensor, w_bias: Tensor, gate_value_weight: Tensor, gate_interaction_weight: Tensor,
    gate_bias: Tensor, chunk_size: int | None,
) -> Tensor:
    """o_i = Σ_j P_ij Ṽ_ij for attention weights probs [B,H,Tq,Tk], in query blocks."""
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


# ----------------------------------------------------------------------------- causal forms
# docs/variants.md §5: queries are the last Tq of the Tk keys; query i reads the real keys j <= i
# and always its own (`_causal.causal_allowed`).


def qvi_causal_pairwise_attention(
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
    """QVICausalPairwiseAttention(query, key, value, key_padding_mask, u_weight, u_bias,
    w_weight, w_bias, gate_value_weight, gate_interaction_weight, gate_bias; scale) -> output

    The pairwise form under the causal rule. Ṽ_ij reads only query i and value j, so the form is
    causal once P is: with a cache, Ṽ_ij is recomputed from the cached V for each new query i.
    """
    scale = resolve_scale(query, scale)
    allowed = causal_allowed(key_padding_mask, query.shape[2])  # [B, 1, Tq, Tk]
    probs = masked_softmax(_scores(query, key, scale), allowed)  # [B, H, Tq, Tk]
    return _pairwise_output(
        probs, query, value, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
        gate_interaction_weight, gate_bias, chunk_size,
    )


def prefix_pool_scores(query: Tensor, pool_weight: Tensor, scale: float) -> Tensor:
    """a_i = scale · (q_i · pool_weight_h): the pooling logits [B, H, T]."""
    return scale * torch.einsum("bhtd,hd->bht", query, pool_weight)  # [B, H, T]


def query_aware_values(
    q_bar: Tensor, value: Tensor, u_weight: Tensor, u_bias: Tensor, w_weight: Tensor,
    w_bias: Tensor, gate_value_weight: Tensor, gate_interaction_weight: Tensor, gate_bias: Tensor,
) -> Tensor:
    """Ṽ = Γ ⊙ V + (1 − Γ) ⊙ V̂, V̂ = Lin(q̄) ⊙ Lin(V): q̄ [B,H,T,d] (or [B,H,1,d]), V [B,H,T,d]."""
    v_hat = head_linear(q_bar, u_weight, u_bias) * head_linear(value, w_weight, w_bias)
    gamma = torch.sigmoid(
        head_linear(value, gate_value_weight)
        + head_linear(v_hat, gate_interaction_weight)
        + gate_bias[:, None, :]
    )  # [B, H, T, d]
    return gamma * value + (1 - gamma) * v_hat  # [B, H, T, d]


def empty_prefix_state(query: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The prefix form's state before any token, for queries [B,H,T,d]: past_values [B,H,0,d],
    prefix_max [B,H] at the most negative finite value, prefix_den [B,H] and prefix_num
    [B,H,d] zero."""
    batch, heads, _, dim = query.shape
    lowest = torch.finfo(query.dtype).min
    return (
        query.new_zeros(batch, heads, 0, dim),  # [B, H, 0, d]
        query.new_full((batch, heads), lowest),  # [B, H]
        query.new_zeros(batch, heads),  # [B, H]
        query.new_zeros(batch, heads, dim),  # [B, H, d]
    )


def prefix_summaries(
    query: Tensor, new_mask: Tensor, prefix_max: Tensor, prefix_den: Tensor, prefix_num: Tensor,
    pool_weight: Tensor, scale: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q̄_j of the queries [B,H,n,d] (0 at padded ones) and the running sums after them.

    The running sums are in log-sum-exp form (m = the largest pooling logit of the real tokens
    so far, den = Σ exp(a_i − m), num = Σ exp(a_i − m) q_i), so no exp overflows. The past
    enters as one pseudo-query, logit m + log(den) and vector num / den; q̄_j is then a masked
    softmax over [past, the new real queries <= j]. Computed in fp32.
    """
    n = query.shape[2]
    heads = query.shape[1]
    q32 = query.float()
    past_max, past_den, past_num = prefix_max.float(), prefix_den.float(), prefix_num.float()
    a = prefix_pool_scores(q32, pool_weight.float(), scale)  # [B, H, n]
    tiny = torch.finfo(torch.float32).tiny
    has_past = past_den > 0  # [B, H]
    past_logit = torch.where(
        has_past, past_max + torch.log(past_den.clamp(min=tiny)), torch.zeros(())
    )  # [B, H]: masked out without a past (0 keeps the masked softmax finite)
    past_vector = past_num / past_den.clamp(min=tiny)[..., None]  # [B, H, d]
    logits = torch.cat([past_logit[..., None], a], dim=-1)  # [B, H, 1+n]
    vectors = torch.cat([past_vector[:, :, None, :], q32], dim=2)  # [B, H, 1+n, d]
    positions = torch.arange(n, device=query.device)
    before = positions[None, :] <= positions[:, None]  # [n(j), n(i)]: i <= j
    new_allowed = before[None, None] & new_mask[:, None, None, :]  # [B, 1, n, n]
    allowed = torch.cat(
        [has_past[:, :, None, None].expand(-1, -1, n, 1), new_allowed.expand(-1, heads, -1, -1)],
        dim=-1,
    )  # [B, H, n, 1+n]
    beta = masked_softmax(logits[:, :, None, :].expand(-1, -1, n, -1), allowed)  # [B, H, n, 1+n]
    q_bar = torch.where(new_mask[:, None, :, None], beta @ vectors, torch.zeros(()))  # [B,H,n,d]

    lowest = torch.finfo(torch.float32).min
    real_a = torch.where(new_mask[:, None, :], a, torch.full((), lowest))  # [B, H, n]
    new_max = torch.maximum(past_max, real_a.max(-1).values)  # [B, H]
    carried = torch.exp(past_max - new_max)  # [B, H]
    weights = torch.where(new_mask[:, None, :], torch.exp(a - new_max[..., None]),
                          torch.zeros(()))  # [B, H, n]
    den = past_den * carried + weights.sum(-1)  # [B, H]
    num = past_num * carried[..., None] + torch.einsum("bhn,bhnd->bhd", weights, q32)  # [B,H,d]
    dtype = query.dtype
    return q_bar.to(dtype), new_max.to(dtype), den.to(dtype), num.to(dtype)


def qvi_prefix_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    past_values: Tensor,
    prefix_max: Tensor,
    prefix_den: Tensor,
    prefix_num: Tensor,
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
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """QVIPrefixAttention(query, key, value, key_padding_mask, past_values, prefix_max,
    prefix_den, prefix_num, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
    gate_interaction_weight, gate_bias, pool_weight; scale)
    -> output, values, present_max, present_den, present_num

    Causal prefix-pooled QVI (docs/variants.md §5). The summary paired with value j pools the
    real queries up to j, q̄_j = Σ_{i<=j} β_i q_i / Σ_{i<=j} β_i with β_i = exp(a_i),
    a_i = scale · (q_i · pool_weight_h); q̄_j = 0 at a padded j. Ṽ_j (as in QVIAttention, with
    q̄_j) then reads tokens <= j only and is final once made, so a cache holds it.

    query [B,H,n,d] and value [B,H,n,d] are the n new tokens'; key [B,H,P+n,d] and
    key_padding_mask [B,P+n] cover the cached and the new tokens; past_values [B,H,P,d] are the
    cached Ṽ; prefix_max, prefix_den [B,H] and prefix_num [B,H,d] the running pooling sums
    (`prefix_summaries`; `empty_prefix_state` before any token). Returns output [B,H,n,d] =
    softmax(S + M_causal) · values, values = [past_values; Ṽ of the new tokens] [B,H,P+n,d],
    and the running sums after the new tokens.
    """
    scale = resolve_scale(query, scale)
    n = query.shape[2]
    new_mask = key_padding_mask[:, key_padding_mask.shape[1] - n:]  # [B, n]
    q_bar, new_max, den, num = prefix_summaries(
        query, new_mask, prefix_max, prefix_den, prefix_num, pool_weight, scale
    )  # [B, H, n, d], [B, H], [B, H], [B, H, d]
    v_tilde = query_aware_values(
        q_bar, value, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
        gate_interaction_weight, gate_bias,
    )  # [B, H, n, d]
    values = torch.cat([past_values, v_tilde], dim=2)  # [B, H, P+n, d]
    probs = masked_softmax(_scores(query, key, scale), causal_allowed(key_padding_mask, n))
    return probs @ values, values, new_max, den, num  # [B, H, n, d], [B, H, P+n, d], ...
