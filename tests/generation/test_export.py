"""A decoder exports with its cache as one graph (attndeploy.export.decoder) and passes the
decoder validation (attndeploy.validate.decoder) for every variant: prefill from the empty past
and decode steps through the same graph, onnxruntime matching PyTorch over left-padded
batches, identical greedy tokens; the loop needs nothing but the metadata."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from attndeploy.errors import ConfigError, ModelError
from attndeploy.export.decoder import export_decoder
from attndeploy.generation.loop import DecoderModel
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.opspec.bodies import DOMAIN
from attndeploy.validate.decoder import validate_decoder
from tests.generation.cases import CASES, tiny_model

FAST = ("standard", "ganet-mlp")  # the rest are slow: an export traces for seconds
EXPORT_PARAMS = [pytest.param(name, id=name, marks=() if name in FAST else pytest.mark.slow)
                 for name in CASES]
TOKENIZER = LMTokenizer.build(["the cat sat on the mat", "a dog ran to the park"])


@pytest.mark.parametrize("name", EXPORT_PARAMS)
def test_a_decoder_exports_one_graph_that_passes_the_decoder_validation(tmp_path, name):
    model = tiny_model(name, vocab=len(TOKENIZER))
    result = export_decoder(model, TOKENIZER, tmp_path / "model.onnx")
    proto = onnx.load(str(tmp_path / "model.onnx"))
    specs = model.state_specs()
    assert [i.name for i in proto.graph.input] == [
        "input_ids", "attention_mask", "position_ids", *[s.past for s in specs]]
    assert [o.name for o in proto.graph.output] == ["logits", *[s.present for s in specs]]
    custom = [n for n in proto.graph.node if n.domain == DOMAIN]
    if model.config.variant != "standard":
        assert len(custom) == model.config.n_layers, "one attndeploy node per attention layer"
        assert {n.op_type for n in custom} <= {f.name for f in proto.functions}
    assert result.custom_nodes == {op: sum(n.op_type == op for n in custom)
                                   for op in {n.op_type for n in custom}}
    meta = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(meta["attndeploy.decoder_state"]) == [s.to_dict() for s in specs]
    assert meta["attndeploy.family"] == "text-generation"

    report = validate_decoder(model, tmp_path / "model.onnx", lengths=(1, 4, 7),
                              batches=(1, 3), steps=3, new_tokens=12)
    assert report, report.to_dict()
    assert [c.name for c in report.checks] == ["incremental", "onnx_steps", "greedy"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("decoder") / "model.onnx"
    export_decoder(tiny_model("standard", vocab=len(TOKENIZER)), TOKENIZER, path)
    return DecoderModel(path)


def test_a_batch_of_left_padded_prompts_continues_as_each_prompt_alone(exported):
    prompts = ["the cat", "a dog ran to the", "mat"]
    together = exported.generate(prompts, 6)
    alone = [exported.generate(p, 6)[0] for p in prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]


def test_streamed_pieces_make_the_text_and_stop_cuts_before_the_stop_text(exported):
    pieces: list[str] = []
    full = exported.generate("the cat", 10, on_text=lambda row, piece: pieces.append(piece))[0]
    assert "".join(pieces) == full.text
    if len(full.token_ids) >= 3:
        stop = exported.tokenizer.decode(full.token_ids[1:3], full.token_ids[0])
        cut = exported.generate("the cat", 10, stop=stop)[0]
        assert cut.finish_reason == "stop"
        assert cut.text == full.text[:full.text.index(stop)]


def test_sampling_with_a_seed_repeats_and_greedy_is_the_default(exported):
    first = exported.generate("the", 8, temperature=1.5, seed=4)[0].token_ids
    assert exported.generate("the", 8, temperature=1.5, seed=4)[0].token_ids == first
    assert exported.generate("the", 8)[0].token_ids == exported.generate(
        "the", 8, temperature=0.0)[0].token_ids


def test_without_the_cache_the_loop_chooses_the_same_tokens(exported):
    prompts = [TOKENIZER.encode("the cat sat"), TOKENIZER.encode("a")]
    assert exported.generate_ids(prompts, 8) == exported.generate_ids(prompts, 8,
                                                                      use_cache=False)


def test_a_request_beyond_the_context_or_for_no_token_is_refused_in_one_line(exported):
    with pytest.raises(ConfigError, match="beyond the model's context of 32"):
        exported.generate("the cat", 31)
    with pytest.raises(ConfigError, match="at least 1"):
        exported.generate("the cat", 0)


def test_a_model_without_a_tokenizer_is_refused_for_text(tmp_path):
    export_decoder(tiny_model("standard"), None, tmp_path / "bare.onnx")
    model = DecoderModel(tmp_path / "bare.onnx")
    with pytest.raises(ModelError, match="no tokenizer"):
        model.generate("hello", 3)
    assert len(model.generate_ids([[2, 5, 6]], 3)[0]) <= 3  # ids still work
    assert np.isfinite(model.step(*_one_token(), model.empty_state(1))[0]).all()


def _one_token():
    ones = np.ones((1, 1), np.int64)
    return ones * 5, ones, ones * 0
