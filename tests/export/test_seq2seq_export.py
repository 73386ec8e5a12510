"""The exported translation model: per variant, the encoder and decoder graphs in onnxruntime
agree with PyTorch at every step and give the same beams; the folder holds Optimum's names."""

from __future__ import annotations

import pytest

from attndeploy.export.seq2seq import export_seq2seq
from attndeploy.generation.seq2seq_onnx import OnnxSeq2Seq
from attndeploy.models.seq2seq.tokenizer import train_bpe
from attndeploy.validate.seq2seq import validate_seq2seq
from tests.models.seq2seq.cases import PARAMS, tiny_model

pytestmark = pytest.mark.slow  # one export of two graphs per variant: ~10 s each

TEXTS = ["der Hund sieht das Haus", "die Katze sieht den Baum", "the dog sees the house",
         "the cat sees the tree"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(TEXTS * 3, 60)


@pytest.mark.parametrize("name", PARAMS)
def test_onnx_equals_pytorch_at_every_step_and_in_beams(name, tokenizer, tmp_path):
    model = tiny_model(name, vocab=len(tokenizer))
    result = export_seq2seq(model, tokenizer, tmp_path / "export")
    assert "past_key_values.0.encoder.key" in result.decoder_inputs
    assert "present.0.decoder.key" in result.decoder_outputs
    assert "present.0.encoder.key" not in result.decoder_outputs  # computed once, by the encoder
    if model.config.variant == "evolving":
        assert "present.1.encoder.evolving_rows" in result.decoder_outputs
        assert "present.1.decoder.evolving_rows" in result.decoder_outputs
    report = validate_seq2seq(model, tmp_path / "export", TEXTS[:2])
    assert report.passed, report.to_dict()
    steps = report.to_dict()["checks"][1]["detail"]
    assert "16 greedy steps" in steps  # a random model runs to max_target: every step compared
    translated = OnnxSeq2Seq(tmp_path / "export").translate(TEXTS[:1], num_beams=4)
    assert isinstance(translated[0][0], str) and translated[0][1].ids
