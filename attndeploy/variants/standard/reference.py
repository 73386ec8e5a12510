"""Standard attention's causal reference (docs/variants.md §5): `CausalAttention`.

Letters: b batch, h heads, i query position, j key position, d head features. Conventions as in
`attndeploy.variants.functional` (docs/ops.md). The bidirectional layer has no reference of its
own: it is `F.scaled_dot_product_attention`, which exports as standard ONNX.
"""

from __future__ import annotations

from torch import Tensor

from attndeploy.variants._causal import causal_allowed
from attndeploy.variants._reference import _scores, masked_softmax, resolve_scale


def causal_attention(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor,
    *, scale: float | None = None,
) -> Tensor:
    """CausalAttention(query, key, value, key_padding_mask; scale) -> output

    Vanilla attention under the causal rule: query i (the last Tq of the Tk keys) reads the real
    keys j <= i and always its own; key_padding_mask is bool [B, Tk].
    """
    scale = resolve_scale(query, scale)
    allowed = causal_allowed(key_padding_mask, query.shape[2])  # [B, 1, Tq, Tk]
    probs = masked_softmax(_scores(query, key, scale), allowed)  # [B, H, Tq, Tk]
    return probs @ value  # [B, H, Tq, d]
