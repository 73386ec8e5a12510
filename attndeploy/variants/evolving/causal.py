"""Causal Evolving Attention with a key/value cache (docs/variants.md §5). Letters as in `_causal`.

The maps' strict upper triangles are zeroed and the 3×3 conv is row-causal, so row i of every
map reads tokens <= i only. A new query's row of A^l needs the two rows above it of the layer's
mixed map A_in; they travel with the K/V cache:

    key, value     [B, H_kv, P, d]   (H_kv = H unless grouped-query)
    evolving_rows  [B, H, 2, P]   the last two rows of A_in (a chain-start layer has no conv and
                                  no rows)

A layer hands the next one the new rows of its combined map A (`CausalResult.logits`,
[B, H, n, P+n]); nothing else of the chain is cached.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attndeploy.errors import ConfigError
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
from attndeploy.variants._common import LayerContext, LayerResult, call_op
from attndeploy.variants.evolving import reference
from attndeploy.variants.evolving.layer import EvolvingAttention

ROWS = 2  # a 3×3 kernel reads the row itself and the two above it


class CausalEvolvingAttention(EvolvingAttention):
    """Decoder self-attention over evolving logits.

    Arguments as `EvolvingAttention` (the same parameters). `forward(x [B,n,D], key_padding_mask
    [B,P+n] | None, prev_logits [B,H,n,P+n] | None, past | None) -> CausalResult` whose `logits`
    go to the next layer; `prev_logits=None` starts a chain (vanilla causal attention).
    """

    # The row-causal kernel reads rows i−2, i−1, i through kernel rows 0, 1, 2 (no padding
    # below), so row i passes unchanged through kernel row 2; the centre tap would hand each
    # row the map of the row above it.
    IDENTITY_TAP = (ROWS, 1)

    @property
    def STATE_NAMES(self) -> tuple[str, ...]:  # noqa: N802
        return ("key", "value") if self.is_chain_start else ("key", "value", "evolving_rows")

    def forward(  # type: ignore[override]
        self, x: Tensor, key_padding_mask: Tensor | None = None,
        prev_logits: Tensor | None = None, past: LayerState | None = None,
        rotary: Rotary | None = None,
    ) -> CausalResult:
        mask = full_key_mask(key_padding_mask, x, past)  # [B, P+n]
        q, k_new, v_new = project_new(self, x, rotary)  # [B, H, n, d], [B, H_kv, n, d] x2
        k = with_past(past, "key", k_new)  # [B, H_kv, P+n, d]
        v = with_past(past, "value", v_new)  # [B, H_kv, P+n, d]
        k_heads, v_heads = expand_kv(self, k), expand_kv(self, v)  # [B, H, P+n, d] each
        if prev_logits is None:
            heads, logits = call_op(
                reference.causal_evolving_attention_start, q, k_heads, v_heads, mask,
                scale=self.scale
            )  # [B, H, n, d], [B, H, n, P+n]
            return CausalResult(self.merge(heads), {"key": k, "value": v}, logits=logits)
        if self.is_chain_start:
            raise ConfigError(
                "this evolving attention layer was made with chain_start=True (no conv): call it "
                "with prev_logits=None, or make it with chain_start=False to continue a chain"
            )
        total = k.shape[2]
        if past is None or "evolving_rows" not in past:
            rows = q.new_zeros(q.shape[0], self.n_heads, ROWS, total)  # [B, H, 2, P+n]
        else:
            rows = F.pad(past["evolving_rows"], (0, total - past["evolving_rows"].shape[-1]))
        heads, logits, rows = call_op(
            reference.causal_evolving_attention, q, k_heads, v_heads, mask, prev_logits, rows,
            self.conv.weight, self.conv.bias,
            scale=self.scale, alpha=self.alpha_in_use, beta=self.beta_in_use,
            negative_slope=self.negative_slope,
        )  # [B, H, n, d], [B, H, n, P+n], [B, H, 2, P+n]
        present = {"key": k, "value": v, "evolving_rows": rows}
        return CausalResult(self.merge(heads), present, logits=logits)

    def empty_state(self, batch: int, like: Tensor) -> LayerState:
        """The state before any token (P = 0), `like`'s dtype and device."""
        state = empty_kv_of(self, batch, like)
        if not self.is_chain_start:
            state["evolving_rows"] = like.new_zeros(batch, self.n_heads, ROWS, 0)  # [B,H,2,0]
        return state

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        """A whole sequence in a built-in model's pass (no cache): the chain as
        `EvolvingAttention.forward_context` runs it."""
        if not self.is_chain_start and context.prev_logits is None:
            index = getattr(self, "layer_index", "?")
            raise ConfigError(
                f"evolving attention layer {index} needs the previous layer's logits"
            )
        prev = None if self.is_chain_start else context.prev_logits
        result = self(x, context.key_padding_mask, prev)
        return LayerResult(result.output, result.logits)
