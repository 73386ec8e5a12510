"""What every attention variant shares: projections, head split/merge, masks, the model hand-off.

Letters: b batch, h heads, t positions, d head dim, D model dim.
A variant module holds only its own maths; everything here is written once. The layers are
public (`attndeploy.nn`) and take plain arguments; they run the variant maths through `call_op`
(the functional reference, or one ONNX node while exporting). The built-in model families build
them from a `ModelConfig` (`from_config`) and call them through `forward_context` with a
`LayerContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from attndeploy.errors import ConfigError


@dataclass(frozen=True)
class LayerContext:
    """Per-forward state the built-in models hand to every attention layer and the pooling.

    key_padding_mask: bool [B, T], True = real token.
    gate_logits: GA-Net decision logits [B, T] (s, or s + noise in training / `sample` mode).
    log_gates: GA-Net training-time log g_soft [B, T] (None in eval).
    hard_gates: GA-Net hard sampled gates [B, T] for straight-through training (else None).
    prev_logits: Evolving attention's carried logits A^{l-1} [B, H, T, T] (None at a chain start).
    """

    key_padding_mask: Tensor
    gate_logits: Tensor | None = None
    log_gates: Tensor | None = None
    hard_gates: Tensor | None = None
    prev_logits: Tensor | None = None

    def with_prev_logits(self, logits: Tensor | None) -> LayerContext:
        return replace(self, prev_logits=logits)


@dataclass(frozen=True)
class LayerResult:
    """An attention layer's output [B, T, D], what it hands on (Evolving: logits) and, for a
    gated layer that knows them, the hard gates bool [B, T] it applied (GA-Net)."""

    output: Tensor
    logits: Tensor | None = None
    gates: Tensor | None = None


def call_op(reference: Callable[..., Any], *args: Any, **attrs: Any) -> Any:
    """Run an op of the `attndeploy` set, named by its PyTorch reference in `functional`.

    Eager (training, evaluation): the reference itself. While torch.export traces (which is how
    `export_model` and `export_checkpoint` export): the op's torch custom op, which the exporter
    turns into one `attndeploy` ONNX node (`attndeploy.opspec.spec.OpSpec.export_call`).
    """
    if torch.compiler.is_exporting():
        from attndeploy.variants.op_registry import op_spec  # onnxscript: imported only to export

        return op_spec(reference).export_call(*args, **attrs)
    return reference(*args, **attrs)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    batch, t, width = x.shape
    return x.view(batch, t, n_heads, width // n_heads).transpose(1, 2)  # [B, H, T, d]


def merge_heads(x: Tensor) -> Tensor:
    batch, heads, t, dim = x.shape
    return x.transpose(1, 2).reshape(batch, t, heads * dim)  # [B, T, D]


def per_head_weight(n_heads: int, dim: int) -> nn.Parameter:
    """[H, d, d] weight initialised U(±1/sqrt(d)) (docs/variants.md §2.2)."""
    bound = dim**-0.5
    return nn.Parameter(torch.empty(n_heads, dim, dim).uniform_(-bound, bound))


def as_key_padding_mask(key_padding_mask: Tensor | None, x: Tensor) -> Tensor:
    """bool [B, T], True = real token, for input x [B, T, D].

    None means every token is real; an integer or float mask counts non-zero as real (like an
    `attention_mask`). Sizes are checked in eager mode only (export traces symbolic sizes).
    """
    if key_padding_mask is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)  # [B, T]
    if key_padding_mask.dim() != 2:
        raise ConfigError(
            f"key_padding_mask must be [batch, seq] (True = real token), got "
            f"{list(key_padding_mask.shape)}"
        )
    if not torch.compiler.is_compiling() and key_padding_mask.shape != x.shape[:2]:
        raise ConfigError(
            f"key_padding_mask {list(key_padding_mask.shape)} does not match the input's "
            f"[batch, seq] {list(x.shape[:2])}"
        )
    if key_padding_mask.dtype != torch.bool:
        key_padding_mask = key_padding_mask != 0
    return key_padding_mask


class AttentionBase(nn.Module):
    """Q/K/V and output projections plus head split/merge for a multi-head self-attention layer.

    Parameters `qkv` (Linear D -> 3D) and `out` (Linear D -> D), as `nn.MultiheadAttention`
    with batch-first inputs. `scale` is the factor on Q·Kᵀ (default 1/sqrt(head dim)).
    Subclasses add their own maths and a `forward`; for the built-in models they also implement
    `from_config` and `forward_context`.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, bias: bool = True, scale: float | None = None
    ) -> None:
        super().__init__()
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
            raise ConfigError(
                f"embed_dim ({embed_dim}) must be a positive multiple of num_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.n_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.n_kv_heads = num_heads  # grouped-query attention: `use_projections`
        self.scale = float(scale) if scale is not None else self.head_dim**-0.5
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.out = nn.Linear(embed_dim, embed_dim, bias=bias)

    @property
    def num_heads(self) -> int:
        return self.n_heads

    def use_projections(self, *, num_kv_heads: int | None = None, bias: bool = True) -> None:
        """Rebuild the Q/K/V and output projections (fresh weights) for grouped-query attention,
        `num_kv_heads` key/value heads each shared by n_heads / num_kv_heads query heads (None:
        one per query head), and with or without biases: a LLaMA-family decoder's layers
        (`attndeploy.models.decoder`). `qkv` then maps D -> (H + 2·H_kv)·d, queries first."""
        kv = self.n_heads if num_kv_heads is None else int(num_kv_heads)
        if kv < 1 or self.n_heads % kv:
            raise ConfigError(f"num_kv_heads ({kv}) must divide num_heads ({self.n_heads})")
        self.n_kv_heads = kv
        self.qkv = nn.Linear(self.embed_dim, (self.n_heads + 2 * kv) * self.head_dim, bias=bias)
        self.out = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, T, D] -> q [B, H, T, d], k and v [B, H_kv, T, d] (H_kv = H unless grouped)."""
        kv_width = self.n_kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([self.embed_dim, kv_width, kv_width], dim=-1)  # [B, T, ·]
        return (split_heads(q, self.n_heads), split_heads(k, self.n_kv_heads),
                split_heads(v, self.n_kv_heads))

    def merge(self, heads: Tensor) -> Tensor:
        """heads [B, H, T, d] -> the layer output [B, T, D]."""
        return self.out(merge_heads(heads))

    def start_as_vanilla(self) -> None:
        """Re-initialise the variant's own parameters so that the layer computes vanilla
        attention of its projections (a warm start from a pretrained model's weights); the
        projections are left alone. Vanilla attention has nothing to change."""

    def set_warm_start_progress(self, fraction: float) -> None:
        """Move a warm-started layer `fraction` (0 to 1) of the way to its variant, for a variant
        whose departure from vanilla is a hyperparameter (Evolving Attention's mixing weights).
        Others learn their way from vanilla and ignore it."""

    @property
    def warm_start_complete(self) -> bool:
        """Whether the layer is its variant as configured (no warm start left to bring in)."""
        return True

    @classmethod
    def from_config(cls, config: Any, layer_index: int) -> AttentionBase:
        """The layer `layer_index` of a built-in model with this config (a `ModelConfig`, which
        sits above the variants: it is built from their registry)."""
        raise NotImplementedError

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        """The built-in models' call: the layer's `forward` fed from the model's context."""
        raise NotImplementedError
