"""Cross-attention for each variant: decoder queries [B, n, D] over the encoder's memory
[B, S, D] (Tq ≠ Tk; docs/variants.md §5, docs/translation.md). Letters: b batch, h heads,
n new target tokens, S source tokens, d head dim.

Each layer is its variant's self-attention layer (the same parameters: Q from the first third
of `qkv`, K and V from the other two) with a rectangular `attend`:

- standard: softmax(q Kᵀ·scale + M) V.
- qvi: `Seq2SeqConfig.qvi_cross_form`.
  - `pooled` (the default): the source makes its own query-aware values. Its tokens' queries
    (the layer's query map over the memory) are pooled into one q̄ per sentence and head, as in
    the encoder's `pooled` form, and Ṽ = Γ ⊙ V + (1 − Γ) ⊙ (Lin(q̄) ⊙ Lin(V)) replaces the cross
    values once per source; the decoder's queries then attend to Ṽ as to V. Ṽ travels as the
    cached cross `value`, so decoding costs what standard attention does.
  - `pairwise`: Ṽ_ij = Γ_ij ⊙ v_j + (1 − Γ_ij) ⊙ (u_i ⊙ w_j) reads decoder query i and value j
    only, so it carries over to Tq ≠ Tk as it is; it materialises [B, H, n, S, d] at every step
    (a training step of the benchmark's model 1.9× standard's, docs/translation.md).
- ganet: the source tokens are gated once per sentence by a gate network over the memory
  (`Seq2Seq.cross_gates`): in eval closed tokens leave the mask (hard gates, with GA-Net's
  rescue), in training log g_soft is added to the scores (relaxed gates).
- evolving: chains cross maps only (cross→cross). Layer 0's map is vanilla; each later layer's
  A_in = α·Z(A^{l−1}) + (1−α)·Z(S) goes through the 3×3 conv, row-causal (the two rows above
  come from `past_rows`, zero at the start; columns padded one each side, since every source
  token is visible) so decoding one token at a time needs only the last two rows of A_in
  (`evolving_rows` [B, H, 2, S]), which travel with the cache.

The cross K/V are computed once per source (`memory_kv`) and travel as constant state.
Plain PyTorch (no custom op), so the exported graph holds standard ONNX ops for them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attndeploy.variants.api import split_heads
from attndeploy.variants.evolving.layer import EvolvingAttention
from attndeploy.variants.functional import head_linear, masked_softmax
from attndeploy.variants.qvi.layer import QVIAttention
from attndeploy.variants.qvi.reference import qvi_pooled_values
from attndeploy.variants.standard.layer import StandardAttention

ROWS = 2  # a 3×3 kernel reads the row itself and the two above it


def memory_kv(layer, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The cross keys and values of the memory [B, S, D] (mask bool [B, S]: its real tokens):
    [B, H, S, d] each; QVI `pooled`'s values are the source's Ṽ."""
    d = layer.embed_dim
    weight, bias = layer.qkv.weight[d:], (None if layer.qkv.bias is None else layer.qkv.bias[d:])
    k, v = F.linear(memory, weight, bias).split([d, d], dim=-1)  # [B, S, D] each
    k, v = split_heads(k, layer.n_heads), split_heads(v, layer.n_heads)  # [B, H, S, d] each
    if isinstance(layer, QVICross) and layer.form == "pooled":
        v = layer.source_values(cross_query(layer, memory), v, mask)  # [B, H, S, d]
    return k, v


def cross_query(layer, x: Tensor) -> Tensor:
    """The queries of the decoder states x [B, n, D]: [B, H, n, d]."""
    d = layer.embed_dim
    bias = None if layer.qkv.bias is None else layer.qkv.bias[:d]
    return split_heads(F.linear(x, layer.qkv.weight[:d], bias), layer.n_heads)


def _zero_pads(x: Tensor, mask: Tensor) -> Tensor:
    """Maps [B, H, n, S] with padded (or closed) source columns set to 0."""
    return torch.where(mask[:, None, None, :], x, torch.zeros((), dtype=x.dtype))


class StandardCross(StandardAttention):
    """Vanilla cross-attention (see the module docstring)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor,
               log_gates: Tensor | None = None) -> Tensor:
        scores = self.scale * (q @ k.transpose(-2, -1))  # [B, H, n, S]
        if log_gates is not None:  # GA-Net training: relaxed gates on the source tokens
            scores = scores + log_gates[:, None, None, :].to(scores.dtype)
        return masked_softmax(scores, mask[:, None, None, :]) @ v  # [B, H, n, d]


class QVICross(QVIAttention):
    """QVI cross-attention, `pooled` or `pairwise` (see the module docstring)."""

    def __init__(self, embed_dim: int, num_heads: int, form: str = "pooled") -> None:
        super().__init__(embed_dim, num_heads, form=form)

    def source_values(self, q_source: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """`pooled`: the source's query-aware values Ṽ [B, H, S, d] from its own queries
        q_source and values [B, H, S, d] (mask bool [B, S])."""
        return qvi_pooled_values(
            q_source, v, mask, self.q_map_weight, self.q_map_bias, self.v_map_weight,
            self.v_map_bias, self.gate_v_weight, self.gate_qv_weight, self.gate_bias,
            self.pool_weight, scale=self.scale)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """`pooled`: softmax attention over the source's Ṽ (`v`, made by `memory_kv`).
        `pairwise`: `qvi_pairwise_attention`'s maths in one block (its query-block loop would
        fix the number of new tokens when exported)."""
        probs = masked_softmax(self.scale * (q @ k.transpose(-2, -1)),
                               mask[:, None, None, :])  # [B, H, n, S]
        if self.form == "pooled":
            return probs @ v  # [B, H, n, d]
        u = head_linear(q, self.q_map_weight, self.q_map_bias)  # [B, H, n, d]
        w = head_linear(v, self.v_map_weight, self.v_map_bias)  # [B, H, S, d]
        v_hat = u[:, :, :, None, :] * w[:, :, None, :, :]  # [B, H, n, S, d]
        gamma = torch.sigmoid(
            head_linear(v, self.gate_v_weight, self.gate_bias)[:, :, None]
            + torch.einsum("bhijd,hde->bhije", v_hat, self.gate_qv_weight))  # [B, H, n, S, d]
        v_tilde = gamma * v[:, :, None] + (1 - gamma) * v_hat  # [B, H, n, S, d]
        return torch.einsum("bhij,bhijd->bhid", probs, v_tilde)  # [B, H, n, d]


class EvolvingCross(EvolvingAttention):
    """Evolving cross-attention, chained cross→cross (see the module docstring)."""

    def attend_rows(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor,
                    prev_logits: Tensor | None, past_rows: Tensor | None
                    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """(output [B,H,n,d], this layer's map A [B,H,n,S], the last two rows of A_in
        [B,H,2,S] or None at the chain start)."""
        current = _zero_pads(self.scale * (q @ k.transpose(-2, -1)), mask)  # [B, H, n, S]
        if self.is_chain_start:
            return masked_softmax(current, mask[:, None, None, :]) @ v, current, None
        alpha, beta = self.alpha_in_use, self.beta_in_use
        mixed = alpha * _zero_pads(prev_logits, mask) + (1 - alpha) * current  # [B, H, n, S]
        if past_rows is None:
            past_rows = mixed.new_zeros(mixed.shape[0], mixed.shape[1], ROWS, mixed.shape[3])
        stacked = torch.cat([past_rows, mixed], dim=2)  # [B, H, 2+n, S]
        conv = F.conv2d(F.pad(stacked, (1, 1, 0, 0)), self.conv.weight, self.conv.bias)
        conv = F.leaky_relu(conv, self.negative_slope)  # [B, H, n, S]
        logits = _zero_pads(beta * conv + (1 - beta) * mixed, mask)  # [B, H, n, S]
        probs = masked_softmax(logits, mask[:, None, None, :])
        return probs @ v, logits, stacked[:, :, -ROWS:]


def cross_layer(variant: str, d_model: int, n_heads: int, index: int, *, alpha: float,
                beta: float, negative_slope: float, qvi_form: str = "pooled"):
    """The cross-attention layer `index` of a decoder of `variant` (GA-Net's is vanilla
    attention over the gated source tokens; QVI's of form `qvi_form`)."""
    if variant == "qvi":
        return QVICross(d_model, n_heads, form=qvi_form)
    if variant == "evolving":
        return EvolvingCross(d_model, n_heads, alpha=alpha, beta=beta,
                             negative_slope=negative_slope, chain_start=index == 0)
    return StandardCross(d_model, n_heads)
