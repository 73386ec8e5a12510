"""The linear-chain CRF: its loss is the forward algorithm's exact log-likelihood and Viterbi
finds the best path, both checked against enumerating every tag sequence of short rows."""

from __future__ import annotations

import itertools

import pytest
import torch

from attndeploy.models.crf import LinearChainCRF

pytestmark = pytest.mark.usefixtures("torch_defaults")


def _crf(num_tags: int = 3) -> LinearChainCRF:
    crf = LinearChainCRF(num_tags)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    return crf


def _every_score(crf: LinearChainCRF, emissions: torch.Tensor, length: int) -> dict:
    """{path: score} over every tag sequence of one row's first `length` tokens."""
    mask = torch.ones(1, length, dtype=torch.bool)
    with torch.no_grad():
        return {path: float(crf.score(emissions[None, :length], torch.tensor([path]), mask))
                for path in itertools.product(range(crf.num_tags), repeat=length)}


def test_the_loss_is_log_z_minus_the_gold_score_by_enumeration() -> None:
    crf = _crf()
    emissions = torch.randn(2, 4, 3)  # [b, t, C]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    tags = torch.tensor([[0, 2, 1, 1], [2, 0, -100, -100]])
    expected = []
    for row, length in enumerate((4, 2)):
        scores = _every_score(crf, emissions[row], length)
        log_z = torch.logsumexp(torch.tensor(list(scores.values())), 0)
        expected.append(float(log_z) - scores[tuple(tags[row, :length].tolist())])
    got = crf.nll(emissions, tags, mask).detach()
    assert got.item() == pytest.approx(sum(expected) / 2, abs=1e-5)


def test_viterbi_returns_the_best_path_by_enumeration_and_pads_with_the_pad_tag() -> None:
    crf = _crf(4)
    emissions = torch.randn(3, 5, 4)
    lengths = (5, 3, 1)
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]  # [b, t]
    best = crf.viterbi(emissions, mask, pad_tag=0)
    for row, length in enumerate(lengths):
        scores = _every_score(crf, emissions[row], length)
        assert tuple(best[row, :length].tolist()) == max(scores, key=scores.get)
        assert best[row, length:].tolist() == [0] * (5 - length)


def test_a_zero_crf_decodes_like_a_softmax_tagger() -> None:
    crf = LinearChainCRF(3)  # zero transitions: each token's argmax
    emissions = torch.randn(2, 6, 3)
    mask = torch.ones(2, 6, dtype=torch.bool)
    assert torch.equal(crf.viterbi(emissions, mask), emissions.argmax(-1))
