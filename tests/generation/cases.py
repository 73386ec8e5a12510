"""The decoder configurations the generation tests run: every variant, and each causal form
worth its own row (QVI prefix and pairwise, GA-Net's per-token and conv gate networks), in our
own small decoder's block and in a LLaMA-family block (rotary positions, grouped-query keys,
RMSNorm, SwiGLU, no biases: what a converted pretrained model has)."""

from __future__ import annotations

import pytest
import torch

from attndeploy.models.decoder.config import VARIANTS, DecoderConfig
from attndeploy.models.decoder.model import CausalLM

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "max_seq": 32}
CASES = {
    "standard": {"variant": "standard"},
    "qvi-prefix": {"variant": "qvi", "qvi_form": "prefix"},
    "qvi-pairwise": {"variant": "qvi", "qvi_form": "pairwise"},
    "ganet-mlp": {"variant": "ganet", "ganet_aux": "mlp"},
    "ganet-conv": {"variant": "ganet", "ganet_aux": "conv"},
    "evolving": {"variant": "evolving", "evolving_alpha": 0.3, "evolving_beta": 0.7,
                 "evolving_negative_slope": 0.01},
}
LLAMA = {"positions": "rope", "rope_theta": 500.0, "norm": "rms", "norm_eps": 1e-6,
         "ffn": "swiglu", "bias": False, "n_kv_heads": 1}
CASES.update({f"{name}-llama": {**CASES[name], **LLAMA}
              for name in ("standard", "qvi-prefix", "qvi-pairwise", "ganet-mlp", "evolving")})
PARAMS = [pytest.param(name, id=name) for name in CASES]


def tiny_model(name: str, vocab: int = 24, seed: int = 0, **overrides) -> CausalLM:
    """A random tiny decoder of case `name` in eval mode."""
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=vocab, **{**TINY, **CASES[name], **overrides})
    return CausalLM(config).eval()


def test_every_variant_has_a_case() -> None:
    assert {case["variant"] for case in CASES.values()} == set(VARIANTS)
