"""Teacher-forced perplexity through the graph (attndeploy.generation.perplexity): the same in a
left-padded batch as text by text, and the same as scoring each next token through the cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndeploy.errors import DataError
from attndeploy.generation import perplexity
from attndeploy.generation.loop import DecoderModel, positions
from tests.quantize.decoders import TEXTS, DecoderExports


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> DecoderModel:
    return DecoderModel(DecoderExports(tmp_path_factory.mktemp("ppl")).get("standard"))


def _by_cache(model: DecoderModel, row: list[int]) -> float:
    """-sum log p(row[t+1] | row[:t+1]), one token at a time through the cache."""
    state, nll = model.empty_state(1), 0.0
    for t in range(len(row) - 1):
        mask = np.ones((1, t + 1), np.int64)
        logits, state = model.step(np.array([[row[t]]]), mask, positions(mask)[:, -1:], state)
        z = logits[0, -1].astype(np.float64)
        nll -= z[row[t + 1]] - (z.max() + math.log(np.exp(z - z.max()).sum()))
    return nll


def test_a_left_padded_batch_scores_each_text_as_alone_and_as_through_the_cache(model):
    rows = perplexity.encode_for_scoring(model, TEXTS)
    together = perplexity.score(model, rows, batch=8)
    alone = [perplexity.score(model, [row]) for row in rows]
    assert together.tokens == sum(len(r) - 1 for r in rows) == sum(a.tokens for a in alone)
    assert together.nll == pytest.approx(sum(a.nll for a in alone), rel=1e-5)
    assert together.nll == pytest.approx(sum(_by_cache(model, r) for r in rows), rel=1e-4)
    assert together.perplexity == pytest.approx(math.exp(together.nll / together.tokens))
    assert perplexity.next_token_agreement(together, together) == 1.0


def test_texts_are_cut_at_max_tokens_and_too_short_ones_left_out(model):
    rows = perplexity.encode_for_scoring(model, ["the cat sat on the mat", ""], max_tokens=3)
    assert [len(r) for r in rows] == [3]
    with pytest.raises(DataError, match="no text"):
        perplexity.encode_for_scoring(model, [""])
