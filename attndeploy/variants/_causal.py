"""What every causal (decoder) attention layer shares: the causal mask, the cache state, the result.

Letters: b batch, h heads, i query position, j key position, d head dim, p past length,
n new tokens (so the keys number p + n and the queries are the last n of them).

Causal rule (docs/variants.md §5, [decision]): query i may read key j when j <= i and j is a real
token; its own key (the diagonal) is always allowed, so no softmax row is empty, a padded query
(left padding) reads only itself, and nothing after i ever enters row i.

The cache is named state, plain tensors, one dict per layer (Optimum's convention: the exporter
names them `past_key_values.{i}.{name}` in and `present.{i}.{name}` out):

    key    [B, H, P, d]   the keys of the cached tokens
    value  [B, H, P, d]   their values (QVI prefix form: the query-aware values Ṽ, final once made)
    + the variant's own entries (each layer's `STATE_NAMES` lists them), e.g. Evolving
      Attention's `evolving_rows` [B, H, 2, P]; QVI prefix's `qvi_prefix_max/_den/_num`;
      GA-Net's `key_mask` [B, P] (closed tokens never enter, so its P follows the density).

Grouped-query attention (a LLaMA-family decoder, `AttentionBase.use_projections`): `key` and
`value` hold H_kv heads, so the cache is H / H_kv times smaller; `expand_kv` repeats them for the
H query heads just before the attention maths. Rotary positions (`rotary` = (cos, sin), each
[B, 1, n, d]) turn the new queries and keys before the keys enter the cache, so cached keys are
final, as in Hugging Face's LLaMA.

Every state tensor has the batch first, so beam search reorders all of them alike
(`reorder_state`). An empty past is `None`, or each layer's `empty_state(batch, like)` (tensors with
P = 0, the same result): the second lets one exported graph serve prefill and decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attndeploy.errors import ConfigError

LayerState = dict[str, Tensor]
# cos, sin [B, 1, n, d] for the new tokens' positions, and the [d, d] matrix R with x R =
# rotate_half(x) (one MatMul in the graph where slices, a negation and a concat were four nodes)
Rotary = tuple[Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class CausalResult:
    """A causal layer's answer for the new tokens.

    output: [B, n, D]; present: the layer's state after these tokens (feed it back as `past`);
    logits: Evolving Attention's new rows of the combined map A [B, H, n, P + n] for the next
    layer of the chain; gates: GA-Net's hard gates bool [B, n] of the new tokens.
    """

    output: Tensor
    present: LayerState
    logits: Tensor | None = None
    gates: Tensor | None = None


def causal_allowed(key_padding_mask: Tensor, num_queries: int) -> Tensor:
    """bool [B, 1, n, p+n]: query i (the last n of the keys) may read key j.

    (j <= i and key j real) or j == i: the diagonal is always open (module docstring).
    """
    num_keys = key_padding_mask.shape[-1]
    offset = num_keys - num_queries  # p: the queries are the last n keys
    rows = torch.arange(num_queries, device=key_padding_mask.device)[:, None] + offset  # [n, 1]
    cols = torch.arange(num_keys, device=key_padding_mask.device)[None, :]  # [1, p+n]
    causal = (cols <= rows)[None, None]  # [1, 1, n, p+n]
    diagonal = (cols == rows)[None, None]  # [1, 1, n, p+n]
    return (causal & key_padding_mask[:, None, None, :]) | diagonal  # [B, 1, n, p+n]


def empty_kv(batch: int, heads: int, dim: int, like: Tensor) -> LayerState:
    """key and value with no token yet: [B, H, 0, d] each."""
    empty = like.new_zeros(batch, heads, 0, dim)  # [B, H, 0, d]
    return {"key": empty, "value": empty.clone()}


def past_length(past: LayerState | None) -> int:  # a SymInt while exporting
    """P, the number of cached tokens (0 for no past)."""
    return 0 if past is None else past["key"].shape[2]


def with_past(past: LayerState | None, name: str, new: Tensor, dim: int = 2) -> Tensor:
    """past[name] and `new` concatenated along `dim` (just `new` without a past)."""
    if past is None:
        return new
    return torch.cat([past[name], new], dim=dim)


def full_key_mask(key_padding_mask: Tensor | None, x: Tensor, past: LayerState | None) -> Tensor:
    """bool [B, P + n] for new tokens x [B, n, D]: the mask covers the past and the new tokens
    (like Hugging Face's `attention_mask`); None = every token real; non-zero = real."""
    batch, new = x.shape[:2]
    total = past_length(past) + new
    if key_padding_mask is None:
        return torch.ones(batch, total, dtype=torch.bool, device=x.device)  # [B, P+n]
    if key_padding_mask.dim() != 2 or (
        not torch.compiler.is_compiling() and tuple(key_padding_mask.shape) != (batch, total)
    ):
        raise ConfigError(
            f"a causal layer's key_padding_mask covers the cached and the new tokens: expected "
            f"[{batch}, {total}] (True = real token), got {list(key_padding_mask.shape)}"
        )
    return key_padding_mask if key_padding_mask.dtype == torch.bool else key_padding_mask != 0


def reorder_state(state: LayerState, beam_index: Tensor) -> LayerState:
    """The state of the beams `beam_index` [B'] picks (batch is axis 0 of every tensor)."""
    return {name: tensor.index_select(0, beam_index) for name, tensor in state.items()}


def state_bytes(state: LayerState) -> int:
    """The memory a layer's state holds, in bytes (GA-Net's follows its density)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in state.values())


def state_names(layer_index: int, state: LayerState) -> dict[str, tuple[str, str]]:
    """{state entry: (past input name, present output name)} in Optimum's convention:
    `past_key_values.{i}.key` -> `present.{i}.key`, and so on for every extra entry."""
    return {
        name: (f"past_key_values.{layer_index}.{name}", f"present.{layer_index}.{name}")
        for name in state
    }


def rotate_half(x: Tensor) -> Tensor:
    """[..., d] -> [-x2, x1] with x1, x2 the two halves (Hugging Face LLaMA's convention)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def half_turn(dim: int) -> Tensor:
    """R [d, d] with x R = rotate_half(x): column j < d/2 takes -x[j + d/2], column j >= d/2
    takes x[j - d/2]; every other entry 0, so the product is exact."""
    half = dim // 2
    turn = torch.zeros(dim, dim)
    turn[torch.arange(half) + half, torch.arange(half)] = -1.0
    turn[torch.arange(half), torch.arange(half) + half] = 1.0
    return turn


def apply_rotary(x: Tensor, rotary: Rotary | None) -> Tensor:
    """x [B, h, n, d] turned by its tokens' angles (rotary None: x as it is)."""
    if rotary is None:
        return x
    cos, sin, turn = rotary  # [B, 1, n, d] x2, [d, d]
    return x * cos + (x @ turn) * sin


def project_new(layer, x: Tensor, rotary: Rotary | None) -> tuple[Tensor, Tensor, Tensor]:
    """The new tokens' q [B, H, n, d], k and v [B, H_kv, n, d], q and k turned by `rotary`."""
    q, k, v = layer.project(x)
    return apply_rotary(q, rotary), apply_rotary(k, rotary), v


def expand_kv(layer, t: Tensor) -> Tensor:
    """Keys or values [B, H_kv, T, d] -> [B, H, T, d]: query head h reads kv head h // g."""
    groups = layer.n_heads // layer.n_kv_heads
    if groups == 1:
        return t
    batch, kv, length, dim = t.shape
    grouped = t[:, :, None].expand(batch, kv, groups, length, dim)  # [B, H_kv, g, T, d]
    return grouped.reshape(batch, kv * groups, length, dim)  # [B, H, T, d]


def empty_kv_of(layer, batch: int, like: Tensor) -> LayerState:
    """A layer's key and value with no token yet: [B, H_kv, 0, d] each."""
    return empty_kv(batch, layer.n_kv_heads, layer.head_dim, like)
