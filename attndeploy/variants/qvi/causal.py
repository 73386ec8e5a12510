"""Causal QVI with a key/value cache (docs/variants.md §5). Letters as in `_causal`.

Two causal forms. `pairwise` is causal as it is (Ṽ_ij reads query i and value j only): the cache
holds K and V, and each step recomputes Ṽ_ij of the new queries against every cached value.
`prefix` is the causal stand-in for `pooled`, whose one summary q̄ reads every query and so leaks
the future: the summary paired with value j pools the queries up to j,
q̄_j = Σ_{i<=j} β_i q_i / Σ_{i<=j} β_i. Ṽ_j is then final once token j is seen, so the cache holds
K and Ṽ (Ṽ per query head, H of them, even when the keys are grouped: it is made with the
queries), plus the running pooling sums (log-sum-exp form: a running maximum and sums relative to
it, so no exp overflows):

    qvi_prefix_max [B, H]     m = the largest pooling logit a_i of the real tokens so far
    qvi_prefix_den [B, H]     Σ_i exp(a_i − m)
    qvi_prefix_num [B, H, d]  Σ_i exp(a_i − m) q_i
"""

from __future__ import annotations

from torch import Tensor

from attndeploy.errors import ConfigError
from attndeploy.variants._causal import (
    CausalResult,
    LayerState,
    Rotary,
    empty_kv,
    expand_kv,
    full_key_mask,
    project_new,
    with_past,
)
from attndeploy.variants._common import LayerContext, LayerResult, call_op
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
        self, x: Tensor, key_padding_mask: Tensor | None = None, past: LayerState | None = None,
        rotary: Rotary | None = None,
    ) -> CausalResult:
        mask = full_key_mask(key_padding_mask, x, past)  # [B, P+n]
        q, k_new, v_new = project_new(self, x, rotary)  # [B, H, n, d], [B, H_kv, n, d] x2
        k = with_past(past, "key", k_new)  # [B, H_kv, P+n, d]
        if self.form == "pairwise":
            v = with_past(past, "value", v_new)  # [B, H_kv, P+n, d]
            heads = call_op(
                reference.qvi_causal_pairwise_attention, q, expand_kv(self, k),
                expand_kv(self, v), mask, *self._weights(),
                scale=self.scale,
                chunk_size=self.pairwise_chunk,
            )  # [B, H, n, d]
            return CausalResult(self.merge(heads), {"key": k, "value": v})
        if past is None:
            past_values, *sums = reference.empty_prefix_state(q)
        else:
            past_values, sums = past["value"], [past[name] for name in PREFIX_STATE]
        heads, v, *sums = call_op(
            reference.qvi_prefix_attention, q, expand_kv(self, k), expand_kv(self, v_new), mask,
            past_values, *sums,
            *self._weights(), self.pool_weight, scale=self.scale,
        )  # [B, H, n, d], [B, H, P+n, d]: Ṽ, the running sums
        present = {"key": k, "value": v, **dict(zip(PREFIX_STATE, sums, strict=True))}
        return CausalResult(self.merge(heads), present)

    def empty_state(self, batch: int, like: Tensor) -> LayerState:
        """The state before any token (P = 0), `like`'s dtype and device."""
        state = empty_kv(batch, self.n_kv_heads, self.head_dim, like)
        if self.form == "prefix":  # Ṽ is per query head: H heads
            state["value"] = like.new_zeros(batch, self.n_heads, 0, self.head_dim)
            queries = like.new_zeros(batch, self.n_heads, 1, self.head_dim)  # [B, H, 1, d]
            _, *sums = reference.empty_prefix_state(queries)
            state.update(zip(PREFIX_STATE, sums, strict=True))
        return state

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        """A whole sequence in a built-in model's pass (no cache)."""
        return LayerResult(self(x, context.key_padding_mask).output)
