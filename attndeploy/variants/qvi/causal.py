"""Causal QVI with a key/value cache (docs/variants.md §5). Letters as in `_causal`.

Two causal forms. `pairwise` is causal as it is (Ṽ_ij reads query i and value j only): the cache
holds K and V, and each step recomputes Ṽ_ij of the new queries against every cached value.
`prefix` is the causal stand-in for `pooled`, whose one summary q̄ reads every query and so leaks
the future: the summary paired with value j pools the queries up to j,
q̄_j = Σ_{i<=j} β_i q_i / Σ_{i<=j} β_i. Ṽ_j is then final once token j is seen, so the cache holds
K and Ṽ, plus the running pooling sums (log-sum-exp form: a running maximum and sums relative to
it, so no exp overflows):

    qvi_prefix_max [B, H]     m = the largest pooling logit a_i of the real tokens so far
    qvi_prefix_den [B, H]     Σ_i exp(a_i − m)
    qvi_prefix_num [B, H, d]  Σ_i exp(a_i − m) q_i
"""

from __future__ import annotations

import torch
from torch import Tensor

from attndeploy.errors import ConfigError
from attndeploy.variants._causal import (
    CausalResult,
    LayerState,
    causal_allowed,
    full_key_mask,
    past_length,
    with_past,
)
from attndeploy.variants._common import call_op
from attndeploy.variants._reference import _scores, masked_softmax
from attndeploy.variants.qvi import reference
from attndeploy.variants.qvi.layer import QVIAttention

CAUSAL_QVI_FORMS = ("prefix", "pairwise")
PREFIX_STATE = ("qvi_prefix_max", "qvi_prefix_den", "qvi_prefix_num")


class CausalQVIAttention(QVIAttention):
    """Decoder self-attention with query-value interaction.

    `CausalQVIAttention(embed_dim, num_heads, *, form="prefix"|"pairwise", ...)` (the other
    arguments as `QVIAttention`; `prefix` has `pooled`'s parameters, so a pooled layer's state
    dict loads into it). `forward(x [B,n,D], key_padding_mask [B,P+n] | None, past | None)
    -> CausalResult`. Form `pooled` is refused: its summary reads every query.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, form: str = "prefix", bias: bool = True,
        pairwise_chunk: int = 64, scale: float | None = None,
    ) -> None:
        if form == "pooled":
            raise ConfigError(
                "QVI form 'pooled' reads every query (its summary leaks future tokens), so a "
                "causal layer cannot use it: choose form 'prefix' (causal prefix pooling, the "
                "same parameters) or 'pairwise'"
            )
        if form not in CAUSAL_QVI_FORMS:
            raise ConfigError(
                f"causal QVI form must be one of {', '.join(CAUSAL_QVI_FORMS)}, got {form!r}"
            )
        super().__init__(
            embed_dim, num_heads, form="pooled" if form == "prefix" else form, bias=bias,
            pairwise_chunk=pairwise_chunk, scale=scale,
        )
        self.form = form

    @property
    def STATE_NAMES(self) -> tuple[str, ...]:  # noqa: N802  (a class-level name on the others)
        return ("key", "value", *PREFIX_STATE) if self.form == "prefix" else ("key", "value")

    def _weights(self) -> tuple[Tensor, ...]:
        return (
            self.q_map_weight, self.q_map_bias, self.v_map_weight, self.v_map_bias,
            self.gate_v_weight, self.gate_qv_weight, self.gate_bias,
        )

    def forward(  # type: ignore[override]
        self, x: Tensor, key_padding_mask: Tensor | None = None, past: LayerState | None = None
    ) -> CausalResult:
        mask = full_key_mask(key_padding_mask, x, past)  # [B, P+n]
        q, k_new, v_new = self.project(x)  # [B, H, n, d]
        k = with_past(past, "key", k_new)  # [B, H, P+n, d]
        if self.form == "pairwise":
            v = with_past(past, "value", v_new)  # [B, H, P+n, d]
            heads = call_op(
                reference.qvi_causal_pairwise_attention, q, k, v, mask, *self._weights(),
                scale=self.scale,
                chunk_size=self.pairwise_chunk,
            )  # [B, H, n, d]
            return CausalResult(self.merge(heads), {"key": k, "value": v})
        new_mask = mask[:, past_length(past):]  # [B, n]
        q_bar, sums = self._prefix_summaries(q, new_mask, past)  # [B, H, n, d]
        v_tilde = reference.query_aware_values(q_bar, v_new, *self._weights())  # [B, H, n, d]
        v = with_past(past, "value", v_tilde)  # [B, H, P+n, d]: Ṽ, final once made
        probs = masked_softmax(_scores(q, k, self.scale), causal_allowed(mask, q.shape[2]))
        heads = probs @ v  # [B, H, n, d]
        return CausalResult(self.merge(heads), {"key": k, "value": v, **sums})

    def _prefix_summaries(
        self, q: Tensor, new_mask: Tensor, past: LayerState | None
    ) -> tuple[Tensor, LayerState]:
        """q̄_j for the new queries q [B,H,n,d] (0 at padded ones) and the updated running sums.

        The past enters as one pseudo-query: logit m + log(den), vector num / den; q̄_j is then a
        masked softmax over [past, new queries <= j], as `reference.qvi_prefix_attention` pools.
        """
        batch, heads, n, dim = q.shape
        lowest = torch.finfo(torch.float32).min
        if past is None:
            past_max = q.new_full((batch, heads), lowest, dtype=torch.float32)  # [B, H]
            past_den = q.new_zeros((batch, heads), dtype=torch.float32)  # [B, H]
            past_num = q.new_zeros((batch, heads, dim), dtype=torch.float32)  # [B, H, d]
        else:
            past_max, past_den, past_num = (past[name] for name in PREFIX_STATE)
        a = reference.prefix_pool_scores(q, self.pool_weight, self.scale).float()  # [B, H, n]
        has_past = past_den > 0  # [B, H]
        past_logit = past_max + torch.log(past_den.clamp(min=1e-38))  # [B, H]
        past_vector = past_num / past_den.clamp(min=1e-38)[..., None]  # [B, H, d]
        logits = torch.cat([past_logit[..., None], a], dim=-1)  # [B, H, 1+n]
        vectors = torch.cat([past_vector[:, :, None, :], q.float()], dim=2)  # [B, H, 1+n, d]
        rows = torch.arange(n, device=q.device)[:, None]  # [n, 1]
        cols = torch.arange(n, device=q.device)[None, :]  # [1, n]
        new_allowed = (cols <= rows)[None, None] & new_mask[:, None, None, :]  # [B, 1, n, n]
        allowed = torch.cat(
            [has_past[:, :, None, None].expand(-1, -1, n, 1),
             new_allowed.expand(-1, heads, -1, -1)],
            dim=-1,
        )  # [B, H, n, 1+n]
        beta = masked_softmax(logits[:, :, None, :].expand(-1, -1, n, -1), allowed)  # [B,H,n,1+n]
        q_bar = (beta @ vectors).to(q.dtype)  # [B, H, n, d]
        q_bar = torch.where(new_mask[:, None, :, None], q_bar, torch.zeros((), dtype=q.dtype))

        real_a = torch.where(new_mask[:, None, :], a, torch.full((), lowest))  # [B, H, n]
        new_max = torch.maximum(past_max, real_a.max(-1).values)  # [B, H]
        carried = torch.exp(past_max - new_max)  # [B, H]
        weights = torch.where(new_mask[:, None, :], torch.exp(a - new_max[..., None]),
                              torch.zeros(()))  # [B, H, n]
        den = past_den * carried + weights.sum(-1)  # [B, H]
        num = past_num * carried[..., None] + torch.einsum("bhn,bhnd->bhd", weights, q.float())
        return q_bar, dict(zip(PREFIX_STATE, (new_max, den, num), strict=True))
