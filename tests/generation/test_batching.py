"""Continuous batching (attndeploy.generation.batching) without a server, for every decoder
case: sequences that join a running batch at different steps, with different prompt lengths
and budgets, choose the greedy tokens the in-process loop chooses for each alone, and a seeded
sampled one draws what it draws alone; finished and cancelled sequences leave the batch and
its cache shrinks back to what the live rows use; a request over the context is refused alone."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from attndeploy.errors import ConfigError, DataError
from attndeploy.export.decoder import export_decoder
from attndeploy.generation.batching import ContinuousBatcher, Finished, GenerateRequest
from attndeploy.generation.loop import DecoderModel
from attndeploy.generation.sampling import Sampling
from attndeploy.generation.tokenizer import LMTokenizer
from tests.generation.cases import CASES, tiny_model

FAST = ("standard", "ganet-mlp")  # the rest are slow: an export traces for seconds
PARAMS = [pytest.param(name, id=name, marks=() if name in FAST else pytest.mark.slow)
          for name in CASES]
TOKENIZER = LMTokenizer.build(["the cat sat on the mat", "a dog ran to the park .",
                               "my friend sees the river by the house"])
PROMPTS = ["the cat", "a dog ran to the park", "mat", "the river by the house sat on",
           "my friend"]
_MODELS: dict[str, DecoderModel] = {}


def exported(name: str, folder: Path) -> DecoderModel:
    if name not in _MODELS:
        path = folder / f"{name}.onnx"
        export_decoder(tiny_model(name, vocab=len(TOKENIZER), seed=3), TOKENIZER, path)
        _MODELS[name] = DecoderModel(path, threads=1)
    return _MODELS[name]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("batching")


class Collected:
    """One request's callbacks, recorded."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.ids: list[int] = []
        self.result: Finished | Exception | None = None
        self.finished = threading.Event()

    def request(self, prompt: str, max_new: int, **kwargs) -> GenerateRequest:
        return GenerateRequest(TOKENIZER.encode(prompt, bos=True), max_new,
                               on_piece=self.on_piece, on_done=self.on_done, **kwargs)

    def on_piece(self, text: str, ids: list[int]) -> None:
        self.pieces.append(text)
        self.ids.extend(ids)

    def on_done(self, result) -> None:
        assert self.result is None, "on_done called twice"
        self.result = result
        self.finished.set()


def run_staggered(batcher: ContinuousBatcher, requests: list[tuple[int, GenerateRequest]]
                  ) -> None:
    """Submit each request at its step (a request arriving while others decode), then step
    until all are done."""
    step = 0
    pending = sorted(requests, key=lambda pair: pair[0])
    while pending or batcher.active or not batcher.waiting.empty():
        while pending and pending[0][0] <= step:
            batcher.submit(pending.pop(0)[1])
        batcher.step()
        step += 1
        assert step < 500


@pytest.mark.parametrize("name", PARAMS)
def test_sequences_joining_a_running_batch_choose_their_tokens_alone(name, folder):
    model = exported(name, folder)
    batcher = ContinuousBatcher(model, max_batch=3)  # 5 requests: some wait for a slot
    budgets = [12, 5, 20, 3, 9]
    collected = [Collected() for _ in PROMPTS]
    run_staggered(batcher, [(i, c.request(p, n))
                            for i, (c, p, n) in enumerate(zip(collected, PROMPTS, budgets,
                                                                  strict=True))])
    assert batcher.largest_batch >= 2 and batcher.steps > 0
    for c, prompt, budget in zip(collected, PROMPTS, budgets, strict=True):
        alone = model.generate(prompt, budget)[0]
        assert isinstance(c.result, Finished)
        assert c.result.token_ids == alone.token_ids
        assert c.ids == alone.token_ids
        assert c.result.text == alone.text == "".join(c.pieces)
        assert c.result.finish_reason == alone.finish_reason
    assert batcher.active == 0 and batcher.batch.size == 0


def test_a_seeded_sampled_sequence_draws_what_it_draws_alone(folder):
    model = exported("standard", folder)
    batcher = ContinuousBatcher(model, max_batch=4)
    sampled, greedy = Collected(), Collected()
    sampling = Sampling.asked(temperature=1.3, top_k=8, seed=11)
    run_staggered(batcher, [(0, greedy.request("a dog ran", 15)),
                            (3, sampled.request("the cat", 12, sampling=sampling))])
    alone = model.generate("the cat", 12, temperature=1.3, top_k=8, seed=11)[0]
    assert sampled.result.token_ids == alone.token_ids


def test_the_stop_text_ends_a_sequence_as_in_process(folder):
    model = exported("standard", folder)
    full = model.generate("the cat", 12)[0]
    if len(full.token_ids) < 3:
        pytest.skip("the random model ends too soon for a stop text")
    stop = TOKENIZER.decode(full.token_ids[1:3], full.token_ids[0])
    expected = model.generate("the cat", 12, stop=stop)[0]
    batcher = ContinuousBatcher(model)
    got, other = Collected(), Collected()
    run_staggered(batcher, [(0, other.request("my friend", 10)),
                            (1, got.request("the cat", 12, stop=stop))])
    assert got.result.finish_reason == "stop" == expected.finish_reason
    assert got.result.text == expected.text == "".join(got.pieces)


@pytest.mark.parametrize("name", PARAMS)
def test_cancelled_sequences_leave_and_the_cache_shrinks_to_the_live_rows(name, folder):
    model = exported(name, folder)
    batcher = ContinuousBatcher(model, max_batch=8)
    cancelled = threading.Event()
    long_ones = [Collected() for _ in range(6)]
    for c, prompt in zip(long_ones, (PROMPTS * 2)[:6], strict=True):
        batcher.submit(c.request(prompt + " the cat", 12,
                                 is_cancelled=cancelled.is_set))
    for _ in range(3):
        batcher.step()
    width_with_long = batcher.batch.mask.shape[1]
    survivor = Collected()
    batcher.submit(survivor.request("mat", 6))
    batcher.step()
    cancelled.set()  # every long stream's client goes away halfway
    batcher.step()
    reasons = [c.result.finish_reason for c in long_ones]
    assert "cancelled" in reasons and set(reasons) <= {"cancelled", "eos"}
    if batcher.active:  # the short one still runs: only its own columns are left
        assert batcher.active == 1
        assert batcher.batch.mask.shape[1] < width_with_long
        assert batcher.batch.mask.all()
        for entry in model.metadata.state:
            assert batcher.batch.state[entry.past].shape[0] == 1
    while batcher.step():
        pass
    assert batcher.active == 0 and batcher.batch.size == 0
    assert survivor.result.token_ids == model.generate("mat", 6)[0].token_ids


def test_a_request_that_does_not_fit_is_refused_alone(folder):
    model = exported("standard", folder)
    batcher = ContinuousBatcher(model)
    too_long, empty, fine = Collected(), Collected(), Collected()
    batcher.submit(too_long.request("the cat", model.metadata.max_seq))
    batcher.submit(GenerateRequest([], 4, on_done=empty.on_done))
    batcher.submit(fine.request("the cat", 4))
    while batcher.step():
        pass
    assert isinstance(too_long.result, ConfigError)
    assert "beyond the model's context" in str(too_long.result)
    assert isinstance(empty.result, DataError)
    assert fine.result.token_ids == model.generate("the cat", 4)[0].token_ids


def test_the_thread_serves_requests_that_arrive_while_it_decodes(folder):
    model = exported("standard", folder)
    batcher = ContinuousBatcher(model, max_batch=4)
    stopping = threading.Event()
    thread = threading.Thread(target=batcher.run, args=(stopping, 0.01))
    thread.start()
    try:
        collected = [Collected() for _ in PROMPTS]
        for c, prompt in zip(collected, PROMPTS, strict=True):
            batcher.submit(c.request(prompt, 10))
        assert all(c.finished.wait(30) for c in collected)
    finally:
        stopping.set()
        thread.join(10)
    for c, prompt in zip(collected, PROMPTS, strict=True):
        assert c.result.token_ids == model.generate(prompt, 10)[0].token_ids
    assert batcher.active == 0


def test_the_batch_width_follows_the_longest_live_row(folder):
    model = exported("standard", folder)
    batcher = ContinuousBatcher(model, max_batch=2)
    short = next(p for p in PROMPTS if len(model.generate(p, 6)[0].token_ids) == 6)
    long = next(p for p in (" ".join([q] * 4) for q in PROMPTS)
                if len(model.generate(p, 3)[0].token_ids) == 3)
    batcher.submit(Collected().request(long, 3))
    batcher.submit(Collected().request(short, 6))
    batcher.step()
    wide = batcher.batch.mask.shape[1]
    for _ in range(3):
        batcher.step()
    assert batcher.active == 1
    assert batcher.batch.mask.shape[1] < wide
    assert np.all(batcher.batch.mask == 1)
