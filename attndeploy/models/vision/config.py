"""`ImageModelConfig`: the shape of an image-classification model (docs/images.md).

`architecture` is `vit` (patches of `patch_size` as tokens, `n_layers` pre-norm Transformer
blocks, mean pooling) or `aacnn` (a conv stem that halves the image twice, then `n_layers`
attention-augmented conv layers at a quarter of the size, global average pooling).
`attention=False` is the same network with attention removed: a ViT whose blocks are only the
per-patch MLP, an AA-CNN whose augmented layers are plain convolutions of the full width.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attndeploy.errors import ConfigError

VARIANTS = ("standard", "qvi", "ganet", "evolving")
ARCHITECTURES = ("vit", "aacnn")
HEAD = "image_classification"
AACNN_DOWNSAMPLE = 4  # the stem halves height and width twice


@dataclass(frozen=True)
class ImageModelConfig:
    """channels, height, width: the input (the preprocessing's); num_labels: the classes.

    vit: d_model the token width, patch_size the square patch side (dividing height and width),
    d_ff the MLP's width. aacnn: conv_channels the stem's first width (the augmented layers
    have 2 * conv_channels, of which d_model are attention's), d_ff unused.
    ganet_*: the gate network over positions (hidden width, relaxation temperature, the density
    penalty's weight); `ganet_budget` None gates by content (a position is open where its
    logit is > 0), a share b in (0, 1] keeps exactly ceil(b * positions) positions per image
    (the largest logits; queries and keys; no penalty, no training noise: docs/images.md);
    evolving_*: α, β and the LeakyReLU slope of the map convolution."""

    num_labels: int
    channels: int = 1
    height: int = 28
    width: int = 28
    architecture: str = "vit"
    variant: str = "standard"
    attention: bool = True
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 128
    patch_size: int = 4
    conv_channels: int = 32
    dropout: float = 0.1
    qvi_form: str = "pooled"
    ganet_aux_hidden: int = 32
    ganet_temperature: float = 1.0
    ganet_penalty: float = 0.05
    ganet_gather_open_keys: bool = True
    ganet_budget: float | None = None
    evolving_alpha: float = 0.5
    evolving_beta: float = 1.0
    evolving_negative_slope: float = 0.0
    head: str = HEAD

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown variant {self.variant!r} for an image model; "
                              f"valid: {', '.join(VARIANTS)}")
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(f"unknown image architecture {self.architecture!r}; valid: "
                              f"{', '.join(ARCHITECTURES)}")
        for name in ("num_labels", "channels", "height", "width", "d_model", "n_heads",
                     "n_layers", "d_ff", "patch_size", "conv_channels", "ganet_aux_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.num_labels < 2:
            raise ConfigError(f"an image classifier needs at least 2 classes, got "
                              f"{self.num_labels}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by n_heads "
                              f"{self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.qvi_form not in ("pooled", "pairwise"):
            raise ConfigError(f"qvi_form must be pooled or pairwise, got {self.qvi_form!r}")
        side = self.patch_size if self.architecture == "vit" else AACNN_DOWNSAMPLE
        if self.height % side or self.width % side:
            what = (f"the patch size {side}" if self.architecture == "vit"
                    else f"{side} (the AA-CNN stem halves the image twice)")
            raise ConfigError(f"a {self.height}x{self.width} image does not divide by {what}")
        if self.architecture == "aacnn" and self.d_model >= 2 * self.conv_channels:
            raise ConfigError(f"an AA-CNN's attention width d_model ({self.d_model}) must be "
                              f"below its layers' width 2 * conv_channels "
                              f"({2 * self.conv_channels}): the rest are convolution features")
        if self.ganet_budget is not None:
            budget = self.ganet_budget
            if (not isinstance(budget, (int, float)) or isinstance(budget, bool)
                    or not 0.0 < budget <= 1.0):
                raise ConfigError(f"ganet_budget is the share of positions each image keeps, "
                                  f"in (0, 1]; got {budget!r}")
            if self.variant != "ganet":
                raise ConfigError(f"ganet_budget is GA-Net's: give variant 'ganet', not "
                                  f"{self.variant!r}")
        if not self.attention and self.variant != "standard":
            raise ConfigError(f"a network without attention has no attention variant: give "
                              f"variant 'standard', not {self.variant!r}")
        if self.head != HEAD:
            raise ConfigError(f"an image config has head {HEAD!r}, got {self.head!r}")

    @property
    def positions(self) -> int:
        """The attention's sequence length T: patches (vit) or the quarter-size grid (aacnn)."""
        side = self.patch_size if self.architecture == "vit" else AACNN_DOWNSAMPLE
        return (self.height // side) * (self.width // side)

    @property
    def network(self) -> str:
        """The network in words, for train's output and `info`: `vit, evolving attention`, or
        `vit without attention` (the baseline: the same network with attention removed)."""
        if not self.attention:
            return f"{self.architecture} without attention"
        return f"{self.architecture}, {self.variant} attention"

    @property
    def family(self) -> str:
        return self.architecture

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> ImageModelConfig:
        """The config a checkpoint stored; ConfigError naming an unknown key."""
        if not isinstance(raw, dict):
            raise ConfigError(f"an image model config is a JSON object, got "
                              f"{type(raw).__name__}")
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown image model config keys: {', '.join(unknown)}")
        try:
            return cls(**raw)
        except TypeError as exc:
            raise ConfigError(f"invalid image model config: {exc}") from None


def with_architecture_defaults(fields: dict) -> dict:
    """`fields` with the sizes an architecture needs where they were not given: an AA-CNN's
    attention is half its augmented layers' width (`d_model` = `conv_channels`, AA-ResNet's
    even split), since the ViT's default token width would leave it no convolution features."""
    if fields.get("architecture") != "aacnn" or fields.get("d_model") is not None:
        return fields
    channels = fields.get("conv_channels") or ImageModelConfig.conv_channels
    return {**fields, "d_model": channels}
