"""The numpy pieces of generation: the tokenizer's text, the sampler and the trigram baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndeploy.errors import ConfigError
from attndeploy.generation.sampling import Sampling, TokenChooser, filtered_probabilities
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.models.decoder.ngram import KneserNeyTrigram


def test_the_tokenizer_puts_spaces_between_words_but_not_before_punctuation():
    tokenizer = LMTokenizer.build(["hello, world! the cat (sat)."])
    ids = tokenizer.encode("Hello, world! The cat (sat).", bos=True, eos=True)
    assert ids[0] == LMTokenizer.BOS_ID and ids[-1] == LMTokenizer.EOS_ID
    assert tokenizer.decode(ids) == "hello, world! the cat (sat)."
    assert LMTokenizer.from_dict(tokenizer.to_dict()).vocab == tokenizer.vocab


def test_greedy_is_the_argmax_and_top_k_1_or_a_tiny_top_p_samples_it():
    scores = np.random.default_rng(0).normal(size=(4, 30))
    greedy = TokenChooser(Sampling()).choose(scores)
    assert np.array_equal(greedy, scores.argmax(-1))
    for sampling in (Sampling(1.0, top_k=1, seed=1), Sampling(1.0, top_p=1e-6, seed=2)):
        assert np.array_equal(TokenChooser(sampling).choose(scores), greedy)


def test_top_k_and_top_p_leave_out_the_unlikely_tokens():
    scores = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    p = filtered_probabilities(scores, Sampling(1.0, top_k=2))
    assert np.allclose(p, [[0.625, 0.375, 0, 0]])
    p = filtered_probabilities(scores, Sampling(1.0, top_p=0.7))
    assert np.allclose(p, [[0.625, 0.375, 0, 0]])  # 0.5 < 0.7, then 0.8 reaches it


def test_the_same_seed_draws_the_same_tokens():
    scores = np.random.default_rng(0).normal(size=(3, 50))
    first, second = TokenChooser(Sampling(1.0, seed=7)), TokenChooser(Sampling(1.0, seed=7))
    assert [first.choose(scores).tolist() for _ in range(5)] == [
        second.choose(scores).tolist() for _ in range(5)]


def test_sampling_is_asked_for_by_any_of_its_options():
    assert Sampling.asked().greedy
    assert not Sampling.asked(seed=3).greedy
    assert Sampling.asked(top_k=5).temperature == 1.0
    with pytest.raises(ConfigError, match="temperature 0 is greedy"):
        Sampling.asked(temperature=0.0, top_k=3)
    with pytest.raises(ConfigError, match="top-p"):
        Sampling(1.0, top_p=1.5)


def test_the_kneser_ney_trigram_is_a_distribution_and_beats_uniform_on_its_own_text():
    sequences = [[2, 4, 5, 6, 3], [2, 4, 5, 7, 3], [2, 6, 5, 4, 3]] * 3
    model = KneserNeyTrigram(vocab_size=8).fit(sequences)
    for context in ((2, 4), (None, 2), (9, 9)):
        total = sum(model.prob(context[0], context[1], w) for w in range(8))
        assert math.isclose(total, 1.0, rel_tol=1e-9), context
    assert model.perplexity(sequences) < 8
