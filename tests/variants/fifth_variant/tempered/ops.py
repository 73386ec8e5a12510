"""The `tempered` variant's op of the `attndeploy` ONNX set."""
# ruff: noqa: I001  (here `attndeploy.variants.tempered` does not exist; ruff sorts it as third-party)

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.tempered import op_tempered
from attndeploy.variants.tempered.reference import tempered_attention

OPS = (
    OpSpec("TemperedAttention", tempered_attention,
           torch.ops.attndeploy.tempered_attention.default, op_tempered.TemperedAttention),
)
