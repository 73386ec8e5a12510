"""The translation model configurations the seq2seq tests run: every variant (QVI with both
causal decoder forms and both cross forms), one table."""

from __future__ import annotations

import pytest
import torch

from attndeploy.models.seq2seq.config import VARIANTS, Seq2SeqConfig
from attndeploy.models.seq2seq.model import Seq2Seq

TINY = {"d_model": 16, "n_heads": 2, "encoder_layers": 3, "decoder_layers": 3, "d_ff": 32,
        "max_source": 16, "max_target": 16, "dropout": 0.0}
CASES = {
    "standard": {"variant": "standard"},
    "qvi-prefix": {"variant": "qvi", "qvi_form": "prefix"},
    "qvi-pairwise": {"variant": "qvi", "qvi_form": "pairwise", "qvi_cross_form": "pairwise"},
    "ganet": {"variant": "ganet"},
    "evolving": {"variant": "evolving", "evolving_alpha": 0.3, "evolving_beta": 0.7,
                 "evolving_negative_slope": 0.01},
}
PARAMS = [pytest.param(name, id=name) for name in CASES]


def tiny_model(name: str, vocab: int = 30, seed: int = 0, **overrides) -> Seq2Seq:
    """A random tiny translation model of case `name` in eval mode."""
    torch.manual_seed(seed)
    return Seq2Seq(Seq2SeqConfig(vocab_size=vocab, **{**TINY, **CASES[name], **overrides})).eval()


def test_every_variant_has_a_case() -> None:
    assert {case["variant"] for case in CASES.values()} == set(VARIANTS)
