"""The continuous batcher with an encoder-decoder (`attndeploy.generation.batching` +
`seq2seq_serve`): a request's encoder runs once, at admission; its cross keys/values and source
mask join the running batch right-padded along the source, its self cache left-padded along the
target steps; every row decodes what it decodes alone, and the batch's source width follows the
longest live source.

A scripted numpy model checks the layout itself (fast); real exports of every variant check
that served greedy ids are in-process `greedy`'s (slow: one export each)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndeploy.errors import ConfigError
from attndeploy.generation.batching import ContinuousBatcher, GenerateRequest, Start
from attndeploy.generation.metadata import StateEntry
from attndeploy.generation.seq2seq_serve import SOURCE_MASK, Seq2SeqServing

EOS, BOS, VOCAB = 2, 1, 16
SELF, CROSS = "past_key_values.0.decoder.key", "past_key_values.0.encoder.key"


class Pieces:
    """A tokenizer's stream stand-in: each id is the word `w<id> `."""

    def stream(self, ids):
        return self

    def push(self, token: int) -> str:
        return f"w{token} "


def next_token(source: list[int], target: list[int]) -> int:
    """The script: `</s>` once the target is as long as the source, else a function of both."""
    if len(target) >= len(source):
        return EOS
    return 3 + (sum(source) * 7 + sum(target) * 3 + len(target)) % (VOCAB - 3)


def alone(source: list[int], new: int) -> list[int]:
    target = [BOS]
    out: list[int] = []
    for _ in range(new):
        token = next_token(source, target)
        if token == EOS:
            break
        out.append(token)
        target.append(token)
    return out


class Scripted:
    """An encoder-decoder by `next_token`: the cross "keys" are the source ids, the self cache
    the target ids; `step` reads only the columns the masks mark real, and checks the padding
    is where the batcher must put it (source: right, target cache: left)."""

    def __init__(self) -> None:
        self.tokenizer = Pieces()
        self.encoder_runs = 0
        self.widths: list[int] = []
        self.metadata = Seq2SeqServing(
            variant="scripted",
            state=(StateEntry(SELF, "present.0.decoder.key", "float32", ("batch", 1, "past", 1)),
                   StateEntry(CROSS, None, "float32", ("batch", 1, "source", 1)),
                   StateEntry(SOURCE_MASK, SOURCE_MASK, "bool", ("batch", "source"))),
            bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0, max_source=12, max_target=12)

    def check_request(self, prompt_ids, max_new_tokens):
        if max_new_tokens > 12:
            raise ConfigError("max_tokens too large")

    def prefill(self, prompt_ids):
        self.encoder_runs += 1
        source = np.asarray(prompt_ids, np.float32)[None, None, :, None]  # [1, 1, S, 1]
        state = {SELF: np.zeros((1, 1, 0, 1), np.float32), CROSS: source,
                 SOURCE_MASK: np.ones((1, len(prompt_ids)), bool)}
        mask = np.ones((1, 1), np.int64)
        logits, state = self.step(np.array([[BOS]]), mask, np.zeros((1, 1), np.int64), state)
        return Start(logits[:, -1], mask, state, BOS)

    def step(self, ids, mask, position_ids, state):
        batch = ids.shape[0]
        keys = np.concatenate([state[SELF], ids[:, None, :, None].astype(np.float32)], axis=2)
        assert keys.shape[2] == mask.shape[1]  # the cache runs with the target mask
        self.widths.append(state[SOURCE_MASK].shape[1])
        logits = np.full((batch, 1, VOCAB), -1.0, np.float32)
        for row in range(batch):
            real = state[SOURCE_MASK][row]
            assert real[:real.sum()].all(), "the source must be right-padded"
            assert not state[CROSS][row, 0, ~real, 0].any(), "pads must be zero"
            seen = mask[row].astype(bool)
            assert seen[-seen.sum():].all(), "the target cache must be left-padded"
            assert position_ids[row, 0] == seen.sum() - 1
            source = [int(v) for v in state[CROSS][row, 0, real, 0]]
            target = [int(v) for v in keys[row, 0, seen, 0]]
            logits[row, 0, next_token(source, target)] = 1.0
        return logits, {**state, SELF: keys}


SOURCES = [[5, 9, 2], [4, 4, 8, 11, 7, 2], [6, 2], [13, 3, 3, 10, 12, 9, 8, 2], [7, 7, 7, 2]]


def _run(model, sources, new, max_batch=3, stagger=True):
    batcher = ContinuousBatcher(model, max_batch=max_batch)
    done: dict[int, object] = {}
    pieces: dict[int, list[str]] = {i: [] for i in range(len(sources))}
    for index, source in enumerate(sources):
        batcher.submit(GenerateRequest(
            source, new, on_piece=lambda text, ids, i=index: pieces[i].append(text),
            on_done=lambda result, i=index: done.__setitem__(i, result)))
        if stagger:
            batcher.step()  # the next one joins a batch already decoding
    while batcher.step():
        pass
    return batcher, done, pieces


def test_each_request_is_encoded_once_and_decodes_what_it_decodes_alone():
    model = Scripted()
    batcher, done, pieces = _run(model, SOURCES, 10)
    assert model.encoder_runs == len(SOURCES)  # at admission, never per step
    assert batcher.largest_batch == 3
    for index, source in enumerate(SOURCES):
        expected = alone(source, 10)
        assert done[index].token_ids == expected, index
        assert done[index].finish_reason == "eos"
        assert "".join(pieces[index]) == done[index].text == "".join(f"w{t} " for t in expected)


def test_the_length_cap_and_the_batch_width_follow_the_live_rows():
    model = Scripted()
    batcher, done, _ = _run(model, [SOURCES[3], SOURCES[2]], 3, stagger=False)
    assert [done[i].token_ids for i in (0, 1)] == [alone(SOURCES[3], 3), alone(SOURCES[2], 3)]
    assert done[0].finish_reason == "length" and done[1].finish_reason == "eos"
    assert max(model.widths) == len(SOURCES[3])
    assert batcher.active == 0 and batcher.batch.size == 0


def test_the_source_width_shrinks_when_the_longest_source_leaves():
    model = Scripted()
    batcher = ContinuousBatcher(model, max_batch=4)
    results = {}
    for index, (source, new) in enumerate([(SOURCES[3], 2), (SOURCES[0], 10)]):
        batcher.submit(GenerateRequest(source, new,
                                       on_done=lambda r, i=index: results.__setitem__(i, r)))
    batcher.step()  # both admitted, one decode: the long one is done after 2 tokens
    assert 0 in results and batcher.active == 1
    assert batcher.batch.state[CROSS].shape[2] == len(SOURCES[0])  # trimmed to the live row
    while batcher.step():
        pass
    assert results[1].token_ids == alone(SOURCES[0], 10)


def test_a_request_the_model_refuses_gets_its_own_error_and_the_others_run():
    model = Scripted()
    batcher = ContinuousBatcher(model, max_batch=2)
    results = {}
    for index, new in enumerate([13, 5]):
        batcher.submit(GenerateRequest(SOURCES[0], new,
                                       on_done=lambda r, i=index: results.__setitem__(i, r)))
    while batcher.step():
        pass
    assert isinstance(results[0], ConfigError)
    assert results[1].token_ids == alone(SOURCES[0], 5)
    assert model.encoder_runs == 1  # the refused one never reached the encoder


# --------------------------------------------------------------------------- real exports

TEXTS = ["der Hund sieht das Haus", "die Katze sieht den Baum", "the dog sees the house",
         "the cat sees the tree"]
SERVED_SOURCES = ["der Hund sieht das Haus", "die Katze", "the dog sees the house the cat",
                  "Baum", "the cat sees the tree der Hund", "das Haus"]


@pytest.mark.slow  # one export of two graphs per variant
@pytest.mark.parametrize("name", ["standard", "qvi-prefix", "qvi-pairwise", "ganet",
                                  "evolving"])
def test_served_rows_decode_the_in_process_greedy_ids(name, tmp_path):
    from attndeploy.export.seq2seq import export_seq2seq
    from attndeploy.generation.seq2seq import greedy
    from attndeploy.generation.seq2seq_serve import ServedSeq2Seq
    from attndeploy.models.seq2seq.tokenizer import train_bpe
    from tests.models.seq2seq.cases import tiny_model

    tokenizer = train_bpe(TEXTS * 3, 60)
    model = tiny_model(name, vocab=len(tokenizer))
    with torch.no_grad():  # larger weights: a random model whose choices depend on the input
        for parameter in model.parameters():
            parameter.mul_(3)
    export_seq2seq(model, tokenizer, tmp_path / "export")
    served = ServedSeq2Seq(tmp_path / "export")
    sources = [served.prompt_ids(text) for text in SERVED_SOURCES]
    _, done, pieces = _run(served, sources, 12)
    expected = [greedy(served.onnx, [source], 12)[0].ids for source in sources]
    assert len({tuple(ids) for ids in expected}) > 2  # the check is worth something
    for index, ids in enumerate(expected):
        assert done[index].token_ids == ids, index
        assert "".join(pieces[index]) == served.tokenizer.decode(ids)


def test_trim_keeps_one_source_column_when_no_live_row_reads_any():
    """A GA-Net row may close every source token; the graph takes no empty source."""
    from attndeploy.generation.batching import BatchState

    entries = Scripted().metadata.state
    batch = BatchState(entries, SOURCE_MASK)
    for width, real in ((5, False), (3, True)):
        batch.merge(np.ones((1, 1), np.int64), {
            SELF: np.zeros((1, 1, 1, 1), np.float32),
            CROSS: np.ones((1, 1, width, 1), np.float32),
            SOURCE_MASK: np.full((1, width), real)})
    assert batch.state[CROSS].shape[2] == 5  # right-padded to the longer source
    assert batch.state[SOURCE_MASK][1].tolist() == [True] * 3 + [False] * 2
    batch.keep([0])  # the row that reads no source column is the one left
    assert batch.state[CROSS].shape[2] == batch.state[SOURCE_MASK].shape[1] == 1
