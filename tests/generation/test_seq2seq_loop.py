"""The torch-free encoder-decoder loop on a scripted backend: beam search keeps each beam's
state with its beam (the reorder), applies the length penalty, and greedy stops at </s>."""

from __future__ import annotations

import numpy as np

from attndeploy.generation.seq2seq import beam_search, greedy

BOS, EOS, PAD, VOCAB = 1, 2, 0, 6


class Scripted:
    """Log-probabilities that depend on the whole prefix, which the state alone carries: a beam
    that got another beam's state would score differently. Token t after prefix p scores
    -(hash(p + t) % 7) / 3, and </s> is likely once the prefix has 3 tokens."""

    bos_id, eos_id, pad_id, max_target = BOS, EOS, PAD, 8

    def encode(self, input_ids, attention_mask):
        batch = input_ids.shape[0]
        return attention_mask.astype(bool), {"prefix": np.zeros((batch, 0), dtype=np.int64)}

    def step(self, input_ids, position_ids, memory_mask, state):
        prefix = np.concatenate([state["prefix"], input_ids], axis=1)  # [B, P+1]
        logits = np.zeros((len(prefix), VOCAB), dtype=np.float32)
        for row, tokens in enumerate(prefix.tolist()):
            for token in range(VOCAB):
                logits[row, token] = -(hash((*tokens, token)) % 7) / 3
            logits[row, EOS] = 5.0 if len(tokens) > 3 else -5.0
        return logits, {"prefix": prefix}


def _score(ids: list[int], backend: Scripted) -> float:
    """Log-probability of ids + </s> computed from scratch, one prefix at a time."""
    total, prefix = 0.0, [BOS]
    for token in [*ids, EOS]:
        logits, _ = backend.step(np.array([prefix[-1:]]), None, None,
                                 {"prefix": np.array([prefix[:-1]], dtype=np.int64)})
        shifted = logits[0] - logits[0].max()
        total += float(shifted[token] - np.log(np.exp(shifted).sum()))
        prefix.append(token)
    return total


def test_beam_state_follows_its_beam_and_scores_are_length_normalised():
    backend = Scripted()
    for penalty in (0.0, 1.0, 2.0):
        result = beam_search(backend, [5, 3, EOS], num_beams=3, length_penalty=penalty)
        assert len(result.ids) == 3  # </s> after three tokens
        length = len(result.ids) + 1
        assert np.isclose(result.score, _score(result.ids, backend) / length ** penalty)


def test_more_beams_never_find_a_worse_hypothesis():
    backend = Scripted()
    scores = [beam_search(backend, [4, EOS], num_beams=k).score for k in (1, 2, 4)]
    assert scores[0] <= scores[1] + 1e-9 and scores[1] <= scores[2] + 1e-9


def test_greedy_stops_each_row_at_its_end_token():
    results = greedy(Scripted(), [[5, EOS], [3, 4, EOS]])
    assert [len(r.ids) for r in results] == [3, 3]
    assert all(EOS not in r.ids for r in results)
