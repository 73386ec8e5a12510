"""The text-generation family through the command line: `train --data` on {"text"} lines
trains a decoder (perplexity beside the trigram baseline), `export` writes the graph with its
cache, `validate` runs the decoder checks, `generate` streams or prints JSON; bad requests are
one line and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli

pytestmark = pytest.mark.slow  # a training, an export and a validation: about 40 s

SENTENCES = ["the cat sees the ball", "a dog likes the tree", "the bird finds a ball",
             "my friend sees the river", "the cat likes a book", "a dog finds the house"]
TINY = ["--d-model", "16", "--heads", "2", "--layers", "2", "--d-ff", "32", "--max-seq", "24",
        "--steps", "30", "--batch-size", "8"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lm")
    data = folder / "lm.jsonl"
    data.write_text("".join(json.dumps({"text": s + "."}) + "\n" for s in SENTENCES * 8))
    result = run_cli("train", "--data", str(data), "--variant", "ganet", *TINY, "--out",
                     str(folder / "ckpt"), "--json", cwd=folder)
    document = parse_json(result)
    assert document["metrics"]["perplexity"] > 1.0
    assert document["metrics"]["baseline_perplexity"] > 1.0
    assert document["training"]["variant"] == "ganet"
    config = json.loads((folder / "ckpt" / "config.json").read_text())
    assert config["model"]["head"] == "causal_lm"
    exported = parse_json(run_cli("export", str(folder / "ckpt"), "--out",
                                  str(folder / "model.onnx"), "--json", cwd=folder))
    assert "present.0.key_mask" in exported["outputs"]
    return folder


def test_validate_runs_the_decoder_checks(trained):
    document = parse_json(run_cli("validate", str(trained / "ckpt"), str(trained / "model.onnx"),
                                  "--json", cwd=trained))
    assert document["passed"]
    assert [c["name"] for c in document["checks"]] == ["incremental", "onnx_steps", "greedy"]


def test_generate_streams_the_text_that_json_reports(trained):
    args = ("generate", str(trained / "model.onnx"), "--prompt", "the cat", "--max-new-tokens",
            "6")
    document = parse_json(run_cli(*args, "--json", cwd=trained))
    streamed = run_cli(*args, cwd=trained)
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout == document["text"] + "\n"
    assert 1 <= len(document["token_ids"]) <= 6


def test_a_prompt_file_is_one_batch_of_generations(trained):
    (trained / "prompts.txt").write_text("the cat\n\na dog likes\n")
    document = parse_json(run_cli("generate", str(trained / "model.onnx"), "--prompt-file",
                                  str(trained / "prompts.txt"), "--max-new-tokens", "4",
                                  "--json", cwd=trained))
    assert len(document["generations"]) == 2


@pytest.mark.parametrize(("args", "stage", "fragment"), [
    (("--max-new-tokens", "40"), "config", "beyond the model's context of 24"),
    (("--max-new-tokens", "0"), "config", "at least 1"),
    (("--top-p", "2"), "config", "top-p"),
])
def test_bad_requests_are_one_line(trained, args, stage, fragment):
    result = run_cli("generate", str(trained / "model.onnx"), "--prompt", "the cat", *args,
                     cwd=trained)
    assert_one_line_error(result, stage, fragment)


def test_the_encoder_export_options_are_refused_for_a_decoder(trained):
    result = run_cli("export", str(trained / "ckpt"), "--out", str(trained / "half.onnx"),
                     "--fp16", cwd=trained)
    assert_one_line_error(result, "export", "--fp16 does not apply to a text-generation model")
    assert not (trained / "half.onnx").exists()
