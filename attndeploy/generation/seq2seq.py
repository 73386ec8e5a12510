"""Greedy and beam search for an encoder-decoder, torch-free (issue #51).

The loop runs any `Seq2SeqBackend`: PyTorch (`attndeploy.models.seq2seq.backend`) or the
exported encoder and decoder graphs in onnxruntime (`attndeploy.generation.seq2seq_onnx`), so
both decode the same way and their beams can be compared token for token. A backend's state is
a flat dict of numpy arrays whose batch is axis 0 (the decoder's self-attention cache, the
cross keys and values, Evolving Attention's self and cross map rows), so a beam reorder is one
`take` along axis 0 for every entry.

Beam search (`beam_search`): `num_beams` hypotheses per source; each step every beam's
log-probabilities are added to its score, the best 2·num_beams candidates are read in order,
those ending in `</s>` are finished with the score / length ** `length_penalty` (length = the
tokens generated, `</s>` included), the others become the next beams (the first `num_beams`).
It stops when `num_beams` hypotheses are finished and no running beam can beat the worst of them
at its current length, or at `max_new_tokens`. Ties go to the lower beam, then the lower token
id (a stable sort), so the same logits give the same output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

State = dict[str, np.ndarray]


class Seq2SeqBackend(Protocol):
    bos_id: int
    eos_id: int
    pad_id: int
    max_target: int

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray
               ) -> tuple[np.ndarray, State]:
        """Sources [B, S] int64 (right padding) -> (the cross-attention's source mask [B, S],
        the state before the first target token)."""

    def step(self, input_ids: np.ndarray, position_ids: np.ndarray, memory_mask: np.ndarray,
             state: State) -> tuple[np.ndarray, State]:
        """One target token per row [B, 1] -> (logits [B, V] float32, the state after it)."""


@dataclass(frozen=True)
class Translation:
    """A source's output ids (no `<s>`, no `</s>`) and its score (beam: the length-normalised
    log-probability; greedy: the sum of log-probabilities)."""

    ids: list[int]
    score: float


def pad_sources(sources: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids [B, S] int64 right-padded, attention_mask [B, S] int64)."""
    width = max(len(s) for s in sources)
    ids = np.full((len(sources), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(sources), width), dtype=np.int64)
    for row, source in enumerate(sources):
        ids[row, :len(source)] = source
        mask[row, :len(source)] = 1
    return ids, mask


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def reorder(state: State, index: np.ndarray) -> State:
    """The state of the rows `index` picks (every entry's axis 0)."""
    return {name: np.take(value, index, axis=0) for name, value in state.items()}


def greedy(backend: Seq2SeqBackend, sources: Sequence[Sequence[int]],
           max_new_tokens: int | None = None) -> list[Translation]:
    """Each source's most likely next token, step by step, the whole batch at once."""
    limit = min(max_new_tokens or backend.max_target, backend.max_target)
    ids, mask = pad_sources(sources, backend.pad_id)
    memory_mask, state = backend.encode(ids, mask)
    batch = len(sources)
    tokens = np.full((batch, 1), backend.bos_id, dtype=np.int64)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    scores = np.zeros(batch)
    done = np.zeros(batch, dtype=bool)
    for position in range(limit):
        logits, state = backend.step(tokens, np.full((batch, 1), position, dtype=np.int64),
                                     memory_mask, state)
        logprobs = _log_softmax(logits.astype(np.float64))
        chosen = logprobs.argmax(axis=-1)  # [B]
        for row in np.flatnonzero(~done):
            scores[row] += logprobs[row, chosen[row]]
            if chosen[row] == backend.eos_id:
                done[row] = True
            else:
                outputs[row].append(int(chosen[row]))
        if done.all():
            break
        tokens = np.where(done, backend.pad_id, chosen)[:, None].astype(np.int64)
    return [Translation(out, float(s)) for out, s in zip(outputs, scores, strict=True)]


def beam_search(backend: Seq2SeqBackend, source: Sequence[int], num_beams: int = 4,
                length_penalty: float = 1.0, max_new_tokens: int | None = None) -> Translation:
    """One source's best hypothesis by beam search (the module docstring)."""
    if num_beams < 1:
        raise ValueError(f"num_beams must be at least 1, got {num_beams}")
    limit = min(max_new_tokens or backend.max_target, backend.max_target)
    ids, mask = pad_sources([source], backend.pad_id)
    memory_mask, state = backend.encode(ids, mask)
    every = np.zeros(num_beams, dtype=np.int64)
    memory_mask, state = np.take(memory_mask, every, axis=0), reorder(state, every)
    beams: list[list[int]] = [[] for _ in range(num_beams)]
    scores = np.full(num_beams, -np.inf)
    scores[0] = 0.0  # one live beam at the start: the others are copies
    tokens = np.full((num_beams, 1), backend.bos_id, dtype=np.int64)
    finished: list[tuple[float, list[int]]] = []
    for position in range(limit):
        logits, state = backend.step(tokens, np.full((num_beams, 1), position, dtype=np.int64),
                                     memory_mask, state)
        candidates = scores[:, None] + _log_softmax(logits.astype(np.float64))  # [K, V]
        flat = candidates.reshape(-1)
        order = np.argsort(-flat, kind="stable")[:2 * num_beams]
        length = position + 1
        next_beams, next_scores, picked, next_tokens = [], [], [], []
        for index in order:
            beam, token = divmod(int(index), candidates.shape[1])
            score = float(flat[index])
            if not np.isfinite(score):
                continue
            if token == backend.eos_id:
                finished.append((score / length ** length_penalty, beams[beam]))
                continue
            next_beams.append([*beams[beam], token])
            next_scores.append(score)
            picked.append(beam)
            next_tokens.append(token)
            if len(next_beams) == num_beams:
                break
        finished.sort(key=lambda item: -item[0])
        finished = finished[:num_beams]
        if not next_beams or (len(finished) == num_beams and
                              max(next_scores) / length ** length_penalty <= finished[-1][0]):
            break
        while len(next_beams) < num_beams:  # fewer finite candidates than beams: pad, dead
            next_beams.append(next_beams[0])
            next_scores.append(-np.inf)
            picked.append(picked[0])
            next_tokens.append(next_tokens[0])
        beams, scores = next_beams, np.array(next_scores)
        state = reorder(state, np.array(picked, dtype=np.int64))  # the cache follows its beam
        tokens = np.array(next_tokens, dtype=np.int64)[:, None]
    else:
        for beam, score in zip(beams, scores, strict=True):  # ran out of length: unfinished
            if np.isfinite(score):
                finished.append((float(score) / limit ** length_penalty, beam))
    best = max(finished, key=lambda item: item[0]) if finished else (0.0, [])
    return Translation(list(best[1]), float(best[0]))
