"""`quantize` of a decoder (attndeploy.quantize.decoder): the int8 graph keeps the cache, the
metadata and the attndeploy functions and runs through `DecoderModel`; it is judged by
greedy-token agreement and teacher-forced perplexity, and written only within the tolerances;
options of the other kind of model are refused in one line."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from attndeploy.errors import ConfigError
from attndeploy.generation.loop import DecoderModel
from attndeploy.quantize import QuantizeOptions, quantize_model
from attndeploy.quantize.decoder import (
    DecoderCandidate,
    GreedyCheck,
    PerplexityCheck,
    _failures,
    compare_greedy,
    record_of,
)
from attndeploy.runtime.names import META_QUANTIZATION
from tests.debug.test_debug_cli import run_main
from tests.quantize.decoders import DECODER_PARAMS, texts_file

SMALL = {"prompts": 5, "new_tokens": 8, "prompt_tokens": 6}


def _meta(path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


@pytest.mark.parametrize("name", DECODER_PARAMS)
def test_a_decoder_quantizes_to_an_int8_graph_that_keeps_its_cache_and_generates(
        decoder_exports, tmp_path, name):
    source = decoder_exports.get(name)
    out = tmp_path / "int8.onnx"
    result = quantize_model(source, out, QuantizeOptions(**SMALL),
                            data=texts_file(tmp_path / "texts.jsonl"))
    result.raise_for_failure()
    [candidate] = result.candidates
    assert out.is_file() and candidate.quantized_nodes > 0
    fp32_proto, int8_proto = onnx.load(str(source)), onnx.load(str(out))
    assert [(i.name, i.type) for i in int8_proto.graph.input] == \
        [(i.name, i.type) for i in fp32_proto.graph.input]
    assert [o.name for o in int8_proto.graph.output] == [o.name for o in fp32_proto.graph.output]
    assert {(f.domain, f.name) for f in int8_proto.functions} == \
        {(f.domain, f.name) for f in fp32_proto.functions}
    assert {k: v for k, v in _meta(out).items() if k != META_QUANTIZATION} == _meta(source)
    assert record_of(out)["method"] == "dynamic"
    assert any(n.op_type == "MatMulInteger" for n in int8_proto.graph.node)

    fp32, int8 = DecoderModel(source), DecoderModel(out)
    prompt = [fp32.tokenizer.encode("the cat sat", bos=True)]
    assert len(int8.generate_ids(prompt, 6)[0]) == len(fp32.generate_ids(prompt, 6)[0])
    greedy, ppl = candidate.greedy, candidate.perplexity
    assert greedy.source == "data" and greedy.prompts == SMALL["prompts"]
    # random weights give near-ties, which int8 may flip: most prompts, not all, stay
    assert greedy.identical_prompts == greedy.first_divergence.count(None) >= 3
    assert 0.5 <= greedy.prefix_agreement <= greedy.token_agreement <= 1.0
    assert 0 < greedy.max_prefill_logit_change < 0.1  # int8 moved the logits, a little
    assert ppl is not None and ppl.texts == 8 and ppl.tokens > 20
    assert abs(ppl.relative_change) < 0.01 and ppl.next_token_agreement > 0.95
    record = result.to_dict()
    assert record["family"] == "text-generation" and record["written"]
    assert record["candidates"][0]["perplexity"]["relative_change"] == ppl.relative_change


def test_without_texts_the_prompts_are_random_ids_and_no_perplexity_is_reported(
        decoder_exports, tmp_path):
    result = quantize_model(decoder_exports.get("standard"), tmp_path / "q.onnx",
                            QuantizeOptions(**SMALL, seed=3))
    [candidate] = result.candidates
    assert candidate.greedy.source == "random" and candidate.perplexity is None
    assert candidate.greedy.tokens == SMALL["prompts"] * SMALL["new_tokens"]
    assert result.passed


def _sharpening_quantizer(real):
    """The real dynamic quantization, then the logits multiplied by 20: the same greedy tokens,
    confident where fp32 is not (a bad int8 model only perplexity sees)."""
    def quantize(method, source, target, options, calibration, *, shown):
        real(method, source, target, options, calibration, shown=shown)
        model = onnx.load(str(target))
        producer = next(n for n in model.graph.node if "logits" in n.output)
        producer.output[list(producer.output).index("logits")] = "logits_unsharpened"
        model.graph.initializer.append(
            onnx.numpy_helper.from_array(np.array(20.0, np.float32), "sharpness"))
        model.graph.node.append(onnx.helper.make_node(
            "Mul", ["logits_unsharpened", "sharpness"], ["logits"]))
        onnx.save(model, str(target))
    return quantize


def test_an_int8_decoder_outside_the_tolerances_is_not_written_and_the_miss_is_named(
        decoder_exports, tmp_path, monkeypatch):
    from attndeploy.quantize import quantizer

    monkeypatch.setattr(quantizer, "_quantize", _sharpening_quantizer(quantizer._quantize))
    out = tmp_path / "bad.onnx"
    result = quantize_model(decoder_exports.get("standard"), out, QuantizeOptions(**SMALL),
                            data=texts_file(tmp_path / "texts.jsonl"))
    [candidate] = result.candidates
    assert not result.passed and not out.exists()
    assert candidate.perplexity.relative_change > 1.0
    [miss] = candidate.failures
    assert miss.startswith("perplexity ") and "> +5.00%" in miss
    assert candidate.greedy.token_agreement > 0.5  # the tokens barely moved
    with pytest.raises(Exception, match="nothing written"):
        result.raise_for_failure()


def _candidate(prefix: float, before: float, after: float) -> DecoderCandidate:
    greedy = GreedyCheck("data", 2, 4, 4, 8, prefix, prefix, 0, [1, 2], 0.1)
    return DecoderCandidate("dynamic", greedy,
                            PerplexityCheck("t.jsonl", 2, 10, before, after, 0.9), 1, 1)


def test_the_default_rule_judges_perplexity_and_only_reports_greedy_agreement():
    options = QuantizeOptions()
    assert _failures(_candidate(0.0, 10.0, 10.49), options) == []  # +4.9 %: within 5 %
    [miss] = _failures(_candidate(1.0, 10.0, 10.6), options)
    assert "perplexity 10 -> 10.6 (+6.00%) > +5.00%" == miss
    gated = QuantizeOptions(min_token_agreement=0.5)
    assert _failures(_candidate(0.25, 10.0, 10.0), gated) == [
        "greedy tokens equal up to the first divergence 25.00% < 50.00%"]


def test_greedy_agreement_counts_tokens_up_to_the_first_divergence_and_overall():
    class Fake:  # two models whose continuations differ at a known place
        def __init__(self, rows):
            self.rows = rows
            self.metadata = type("M", (), {"pad_token_id": 0})()

        def step(self, ids, mask, position_ids, state):
            return np.zeros((*ids.shape, 3), np.float32), {}

        def empty_state(self, batch):
            return {}

        def generate_ids(self, prompts, new_tokens):
            return self.rows[:len(prompts)]

    a = Fake([[1, 2, 3, 4], [5, 6, 7, 8]])
    b = Fake([[1, 2, 9, 4], [5, 6, 7, 8]])
    check = compare_greedy(a, b, [[1], [2]], 4, "random")
    assert check.first_divergence == [2, None]
    assert check.prefix_agreement == (2 + 4) / 8
    assert check.token_agreement == 7 / 8
    assert check.identical_prompts == 1


@pytest.mark.parametrize(("options", "fragment"), [
    ({"method": "static"}, "--method static"),
    ({"exclude_worst": 2}, "--exclude-worst 2"),
    ({"grid": "1x8"}, "--shapes 1x8"),
    ({"min_agreement": 0.5}, "--min-agreement 0.5"),
])
def test_an_encoder_only_option_given_to_a_decoder_is_refused(decoder_exports, tmp_path,
                                                              options, fragment):
    with pytest.raises(ConfigError, match="encoder-only") as info:
        quantize_model(decoder_exports.get("standard"), tmp_path / "q.onnx",
                       QuantizeOptions(**options))
    assert fragment in str(info.value) and "is a decoder" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_in_one_line_and_reports_a_decoder_as_json(
        decoder_exports, tmp_path, monkeypatch, capsys):
    source = str(decoder_exports.get("standard"))
    code, _, err = run_main(monkeypatch, capsys, "quantize", source, "--out",
                            str(tmp_path / "q.onnx"), "--exclude-worst", "1")
    assert code == 1 and len(err) == 1 and err[0].startswith("error (config): "), err
    assert "--exclude-worst 1: encoder-only" in err[0]
    assert list(tmp_path.iterdir()) == []
    code, out, _ = run_main(monkeypatch, capsys, "quantize", source, "--out",
                            str(tmp_path / "q.onnx"), "--prompts", "3", "--new-tokens", "4",
                            "--json")
    assert code == 0
    record = json.loads(out)
    assert record["written"] and record["candidates"][0]["greedy"]["prompts"] == 3


def test_a_decoder_only_option_given_to_an_encoder_is_refused(text_exports, tmp_path):
    with pytest.raises(ConfigError, match="decoder-only") as info:
        quantize_model(text_exports.get("standard").path, tmp_path / "q.onnx",
                       QuantizeOptions(max_perplexity_increase=0.1))
    assert "--max-perplexity-increase 0.1" in str(info.value)


def test_a_ganet_decoders_gate_network_stays_fp32_unless_asked(decoder_exports, tmp_path):
    source = decoder_exports.get("ganet-mlp")
    kept = quantize_model(source, tmp_path / "kept.onnx", QuantizeOptions(**SMALL))
    both = quantize_model(source, tmp_path / "int8.onnx",
                          QuantizeOptions(**SMALL, gate_network_fp32=False))
    [kept_candidate], [both_candidate] = kept.candidates, both.candidates
    assert len(kept_candidate.gate_network) == 2  # the gate MLP's two MatMuls
    assert record_of(tmp_path / "kept.onnx")["gate_network"] == kept_candidate.gate_network
    assert both_candidate.gate_network == []
    assert kept_candidate.quantized_nodes == both_candidate.quantized_nodes - 2
