"""GA-Net's op references (docs/variants.md §3): `GatedAttention`, `GatedAttentionPooling` (the
gated pooling every gated variant's classifier head runs), `BudgetGatedAttention` (a fixed share
of positions per row, queries and keys: the image models' `ganet_budget`).

Letters: b batch, h heads, i query position, j key position, d/e head features. Conventions as in
`attndeploy.variants.functional` (docs/ops.md), which re-exports these as the stable functional
API; the layer and the op run them (`call_op`), and the ONNX bodies are tested against them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attndeploy.variants._causal import causal_allowed
from attndeploy.variants._reference import (
    _key_allowed,
    _scores,
    hard_gates,
    masked_softmax,
    resolve_scale,
)


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


# k = ceil(budget * T - BUDGET_SLACK): the slack keeps a product that is an integer in exact
# arithmetic (0.3 * 10) from rounding up a whole position in float (3.0000000000000004).
BUDGET_SLACK = 1e-3


def budget_count(budget: float, positions: int) -> int:
    """k, the positions a row keeps under `budget`: ceil(budget * T - 0.001) within [1, T]."""
    return min(positions, max(1, math.ceil(budget * positions - BUDGET_SLACK)))


def budget_slots(gate_logits: Tensor, key_padding_mask: Tensor, budget: float
                 ) -> tuple[Tensor, Tensor]:
    """The k positions each row keeps: slots int64 [B, k] (largest logit first, ties: smallest
    index, as ONNX TopK orders them; pads come after every real position) and the kept mask
    bool [B, T] (the slots, AND real). Decided in fp32 on the logits."""
    k = budget_count(budget, gate_logits.shape[-1])
    logits32 = gate_logits.float()  # [B, T]
    lowest = torch.full((), torch.finfo(torch.float32).min, device=logits32.device)
    candidates = torch.where(key_padding_mask, logits32, lowest)  # [B, T]
    slots = torch.sort(candidates, dim=-1, descending=True, stable=True).indices[:, :k]  # [B, k]
    kept = torch.zeros_like(key_padding_mask).scatter(1, slots, True) & key_padding_mask
    return slots, kept  # [B, k], [B, T]


def budget_gated_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    gate_logits: Tensor,
    *,
    scale: float | None = None,
    budget: float,
) -> tuple[Tensor, Tensor]:
    """BudgetGatedAttention(query, key, value, key_padding_mask, gate_logits; scale, budget)
    -> output, gates

    Every row keeps the k = ceil(budget * T - 0.001) positions (within [1, T]) of largest gate
    logit (`budget_slots`); the kept positions attend among themselves, queries and keys, and
    every other query's output row is 0 (self-attention: Tq = Tk = T). `gates` is the kept mask
    bool [B, T]. Evaluated as the ONNX body is: gather the k rows of Q, K, V, attend over k,
    put the k rows back into [B, H, T, d] (here by a scatter, the body gathers them back).
    """
    scale = resolve_scale(query, scale)
    batch, heads, t, dim = query.shape
    slots, kept = budget_slots(gate_logits, key_padding_mask, budget)  # [B, k], [B, T]
    k = slots.shape[1]
    slot_ok = torch.gather(key_padding_mask, 1, slots)  # [B, k]: a real position
    index = slots[:, None, :, None]  # [B, 1, k, 1]
    kept_q = torch.gather(query, 2, index.expand(batch, heads, k, dim))  # [B, H, k, d]
    kept_k = torch.gather(key, 2, index.expand(batch, heads, k, key.shape[-1]))  # [B, H, k, d]
    value_index = index.expand(batch, heads, k, value.shape[-1])  # [B, H, k, d_v]
    kept_v = torch.gather(value, 2, value_index)  # [B, H, k, d_v]
    probs = masked_softmax(_scores(kept_q, kept_k, scale), slot_ok[:, None, None, :])
    attended = probs @ kept_v  # [B, H, k, d_v]
    attended = torch.where(slot_ok[:, None, :, None], attended,
                           torch.zeros((), dtype=attended.dtype))  # a kept pad's row: 0
    output = value.new_zeros(batch, heads, t, value.shape[-1])  # [B, H, T, d_v]
    return output.scatter(2, value_index, attended), kept


def gated_attention_pooling(
    values: Tensor, scores: Tensor, key_padding_mask: Tensor, gate_logits: Tensor
) -> tuple[Tensor, Tensor]:
    """GatedAttentionPooling(values, scores, key_padding_mask, gate_logits) -> context, gates

    alpha = softmax over open positions of scores; context = Σ_t alpha_t values_t  [B, D].
    """
    gates = hard_gates(gate_logits, key_padding_mask)  # [B, T]
    alpha = masked_softmax(scores, gates)  # [B, T]
    return torch.einsum("bt,btd->bd", alpha, values), gates


def causal_gated_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    gate_logits: Tensor,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """CausalGatedAttention(query, key, value, key_padding_mask, gate_logits; scale)
    -> output, gates, open_keys, open_values, open_slots

    Hard-gated attention under the causal rule (docs/variants.md §5): gates = (logit > 0) AND
    real, with no rescue over the whole row: query i (the last n of the P+n keys) reads the open
    keys j <= i and always its own key (the per-row rescue), so no row is empty and a closed
    token is never read by a later one. So a decoder's cache leaves closed tokens out: it
    appends open_keys and open_values [B,H,N,d], the new tokens (the last n) whose gate is open,
    gathered open-first in position order into N = the batch's largest open count slots (N may
    be 0), and open_slots [B,N], which slots hold an open token. (The cached keys come first in
    key, with a positive logit: they were open when cached.)
    """
    scale = resolve_scale(query, scale)
    gates = (gate_logits > 0) & key_padding_mask  # [B, P+n]
    allowed = causal_allowed(gates, query.shape[2])  # [B, 1, n, P+n]
    probs = masked_softmax(_scores(query, key, scale), allowed)  # [B, H, n, P+n]
    opened = _open_tokens(key, value, gates, query.shape[2])
    return (probs @ value, gates, *opened)  # [B, H, n, d], [B, P+n], what the cache appends


def _open_tokens(key: Tensor, value: Tensor, gates: Tensor, num_new: int
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """The last `num_new` keys and values whose gate is open, gathered into N slots."""
    batch, heads, t_k, dim = key.shape
    past = t_k - num_new
    new_gates = gates[:, past:]  # [B, n]
    n_open = int(new_gates.sum(-1).max()) if num_new else 0  # N, 0 <= N <= n
    positions = torch.arange(num_new, device=gates.device)
    order = new_gates.long() * (2 * num_new) - positions[None, :]  # [B, n]: open first, in order
    slots = torch.topk(order, n_open, dim=-1).indices  # [B, N]
    slot_ok = torch.gather(new_gates, 1, slots)  # [B, N]
    index = (slots + past)[:, None, :, None].expand(batch, heads, n_open, dim)  # [B, H, N, d]
    return torch.gather(key, 2, index), torch.gather(value, 2, index), slot_ok  # [B,H,N,d] x2
