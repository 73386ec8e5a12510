"""The `sieve` variant's op of the `attndeploy` ONNX set."""
# ruff: noqa: I001  (here `attndeploy.variants.sieve` does not exist; ruff sorts it as third-party)

from __future__ import annotations

import torch

from attndeploy.opspec.spec import OpSpec
from attndeploy.variants.sieve import op_sieve
from attndeploy.variants.sieve.reference import sieve_attention

OPS = (
    OpSpec("SieveAttention", sieve_attention,
           torch.ops.attndeploy.sieve_attention.default, op_sieve.SieveAttention),
)
