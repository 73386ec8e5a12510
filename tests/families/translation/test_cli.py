"""The translation family through the command line: `train --data` on {"source", "target"}
lines trains an encoder-decoder and reports BLEU and chrF beside the retrieval and copy
baselines; `info` shows them; bad lines are one line and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli

WORDS = [("Katze", "cat"), ("Hund", "dog"), ("Vogel", "bird"), ("Baum", "tree"),
         ("Haus", "house"), ("Buch", "book"), ("Ball", "ball"), ("Fluss", "river")]
PAIRS = [(f"der {a} sieht das {b}", f"the {x} sees the {y}")
         for a, x in WORDS for b, y in WORDS if a != b]
TINY = ["--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32", "--max-seq", "12",
        "--steps", "20", "--batch-size", "8"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mt")
    data = folder / "pairs.jsonl"
    data.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in PAIRS))
    result = run_cli("train", "--data", str(data), "--variant", "evolving", *TINY,
                     "--eval-fraction", "0.2", "--out", str(folder / "ckpt"), "--json",
                     cwd=folder)
    document = parse_json(result)
    metrics = document["metrics"]
    for name in ("bleu", "chrf", "baseline_bleu", "baseline_chrf", "copy_bleu", "copy_chrf"):
        assert 0.0 <= metrics[name] <= 100.0, name
    assert metrics["baseline_chrf"] > metrics["copy_chrf"]  # retrieval knows the words
    assert document["training"]["variant"] == "evolving"
    config = json.loads((folder / "ckpt" / "config.json").read_text())
    assert config["model"]["head"] == "translation"
    assert config["model"]["encoder_layers"] == config["model"]["decoder_layers"] == 1
    assert config["tokenizer"]["type"] == "hf-tokenizer"
    return folder


def test_info_shows_bleu_beside_the_baselines(trained):
    document = parse_json(run_cli("info", str(trained / "ckpt"), "--json", cwd=trained))
    metrics = document["metrics"]
    assert document["family"] == "translation"
    assert document["bleu (model / retrieval / copy)"] == (
        f"{metrics['bleu']} / {metrics['baseline_bleu']} / {metrics['copy_bleu']}")


def test_a_line_without_a_target_is_one_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"source": "a", "target": "b"}) + "\n"
                    + json.dumps({"source": "c", "target": ""}) + "\n")
    result = run_cli("train", "--data", str(data), "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert_one_line_error(result, "data", "bad.jsonl:2", "target")
    assert not (tmp_path / "x").exists()


@pytest.mark.slow  # an export of two graphs and a validation: about a minute
def test_export_validate_and_generate_with_beams(trained):
    exported = parse_json(run_cli("export", str(trained / "ckpt"), "--out",
                                  str(trained / "onnx"), "--json", cwd=trained))
    assert "present.0.encoder.key" in exported["encoder_outputs"]
    assert "past_key_values.0.decoder.key" in exported["decoder_inputs"]
    document = parse_json(run_cli("validate", str(trained / "ckpt"), str(trained / "onnx"),
                                  "--json", cwd=trained))
    assert document["passed"]
    assert [c["name"] for c in document["checks"]] == ["incremental", "onnx_steps", "beams"]
    greedy = parse_json(run_cli("generate", str(trained / "onnx"), "--prompt", PAIRS[0][0],
                                "--json", cwd=trained))
    beams = parse_json(run_cli("generate", str(trained / "onnx"), "--prompt", PAIRS[0][0],
                               "--num-beams", "4", "--json", cwd=trained))
    assert greedy["source"] == beams["source"] == PAIRS[0][0]
    assert beams["num_beams"] == 4 and isinstance(beams["text"], str)


def test_num_beams_below_one_is_one_line(trained):
    result = run_cli("generate", str(trained / "ckpt"), "--prompt", "x", "--num-beams", "0",
                     cwd=trained)
    assert_one_line_error(result, "data", "--num-beams")


@pytest.mark.slow  # two exports of two graphs
def test_export_writes_its_default_folder_and_replaces_a_folder_only_with_force(trained):
    checkpoint = trained / "ckpt"
    default = parse_json(run_cli("export", str(checkpoint), "--json", cwd=trained))
    assert default["folder"] == str(checkpoint / "export")  # not a folder named model.onnx
    assert (checkpoint / "export" / "decoder_model.onnx").is_file()
    again = run_cli("export", str(checkpoint), "--out", str(checkpoint / "export"), cwd=trained)
    assert_one_line_error(again, "output", "already exists", "--force")
    replaced = parse_json(run_cli("export", str(checkpoint), "--out", str(checkpoint / "export"),
                                  "--force", "--json", cwd=trained))
    assert replaced["folder"] == str(checkpoint / "export")
    info = parse_json(run_cli("info", str(checkpoint / "export"), "--json", cwd=trained))
    metrics = parse_json(run_cli("info", str(checkpoint), "--json", cwd=trained))["metrics"]
    assert info["family"] == "translation" and info["variant"] == "evolving"
    assert info["chrf (model / retrieval / copy)"] == (
        f"{metrics['chrf']} / {metrics['baseline_chrf']} / {metrics['copy_chrf']}")
    (trained / "a-file").write_text("x")
    onto_a_file = run_cli("export", str(checkpoint), "--out", str(trained / "a-file"),
                          "--force", cwd=trained)
    assert_one_line_error(onto_a_file, "output", "a-file", "not a folder")
