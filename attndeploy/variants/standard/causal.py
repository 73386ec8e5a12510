"""Causal vanilla attention with a key/value cache (docs/variants.md §5). Letters as in `_causal`.

`CausalStandardAttention` has the parameters of `StandardAttention` (a state dict loads into
either). It exports as standard ONNX: the masked softmax of the reference, no custom op.
"""

from __future__ import annotations

from torch import Tensor

from attndeploy.variants._causal import (
    CausalResult,
    LayerState,
    Rotary,
    empty_kv_of,
    expand_kv,
    full_key_mask,
    project_new,
    with_past,
)
from attndeploy.variants._common import LayerContext, LayerResult
from attndeploy.variants.standard.layer import StandardAttention
from attndeploy.variants.standard.reference import causal_attention


class CausalStandardAttention(StandardAttention):
    """Decoder self-attention: `forward(x [B,n,D], key_padding_mask [B,P+n] | None,
    past: {"key", "value"} | None, rotary=None) -> CausalResult` (output [B,n,D], present
    state; `rotary` and grouped keys: `attndeploy.variants._causal`)."""

    STATE_NAMES = ("key", "value")

    def forward(  # type: ignore[override]
        self, x: Tensor, key_padding_mask: Tensor | None = None, past: LayerState | None = None,
        rotary: Rotary | None = None,
    ) -> CausalResult:
        mask = full_key_mask(key_padding_mask, x, past)  # [B, P+n]
        q, k_new, v_new = project_new(self, x, rotary)  # [B, H, n, d], [B, H_kv, n, d] x2
        k = with_past(past, "key", k_new)  # [B, H_kv, P+n, d]
        v = with_past(past, "value", v_new)  # [B, H_kv, P+n, d]
        heads = causal_attention(q, expand_kv(self, k), expand_kv(self, v), mask,
                                 scale=self.scale)  # [B, H, n, d]
        return CausalResult(self.merge(heads), {"key": k, "value": v})

    def empty_state(self, batch: int, like: Tensor) -> LayerState:
        """The state before any token (P = 0), `like`'s dtype and device."""
        return empty_kv_of(self, batch, like)

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        """A whole sequence in a built-in model's pass (no cache)."""
        return LayerResult(self(x, context.key_padding_mask).output)
