"""A checkpoint's held-out examples, made again from its `data` entry: the exported model scores
on them exactly the accuracy training recorded, for a data file and a task, trained by `train`
and by `train --hf-model`; a file that is not the one trained on is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attndeploy.checkpoint import read_config
from attndeploy.data import get_task
from attndeploy.data.held_out import held_out_of
from attndeploy.errors import DataError
from attndeploy.train import TrainConfig
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli

MAX_SEQ = 32
STEPS = TrainConfig(steps=4, batch_size=16)
SOURCES = ("data", "task")  # what the checkpoint trained on
TRAINERS = ("train", "hf")  # attndeploy's own model, or `train --hf-model` on a tiny BERT config


def write_data(path: Path) -> Path:
    """Sixty sparse_evidence examples as labelled text (learnable, two or more labels)."""
    spec = get_task("sparse_evidence")
    rows = [{"text": " ".join(words), "label": spec.label_names[label]}
            for words, label in spec.sample(60, seed=7, max_seq=MAX_SEQ - 2)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def train(trainer: str, source: str, root: Path) -> Path:
    """A tiny standard checkpoint trained on `source` by `trainer`, in `root / "ckpt"`."""
    data = write_data(root / "data.jsonl") if source == "data" else None
    task = "sparse_evidence" if source == "task" else None
    out = root / "ckpt"
    if trainer == "hf":
        pytest.importorskip("transformers", reason="train --hf-model needs the hf extra")
        import transformers

        from attndeploy.integrations.hf_train import train_hf_checkpoint

        transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=MAX_SEQ,
                                ).save_pretrained(str(root / "bert"))
        train_hf_checkpoint(root / "bert", "standard", out, task=task, data_file=data,
                            train_config=STEPS, max_seq=MAX_SEQ, n_train=48, n_eval=24,
                            progress=False)
        return out
    from attndeploy.config import ModelConfig
    from attndeploy.train import train_checkpoint
    from attndeploy.training.data import load_training_data

    dataset = load_training_data(task=task, data_file=data, n_train=48, n_eval=24,
                                 max_seq=MAX_SEQ)
    config = ModelConfig(vocab_size=len(dataset.tokenizer), num_labels=len(dataset.label_names),
                         d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq=MAX_SEQ)
    train_checkpoint(config, dataset, STEPS, out, progress=False)
    return out


def held_out(checkpoint: Path, data_file: Path | None = None):
    config = read_config(checkpoint)
    return held_out_of(config["data"], max_seq=config["model"]["max_seq"], hf="hf" in config,
                       data_file=data_file)


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("source", SOURCES)
def test_the_held_out_examples_reproduce_the_recorded_accuracy(tmp_path: Path, trainer: str,
                                                              source: str):
    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.runtime import InferenceModel

    checkpoint = train(trainer, source, tmp_path)
    config = read_config(checkpoint)
    examples = held_out(checkpoint).examples
    assert len(examples) == config["metrics"]["examples"]
    export_checkpoint(checkpoint, tmp_path / "model.onnx")
    predictions = InferenceModel(tmp_path / "model.onnx", threads=1).predict(
        [text for text, _ in examples])
    right = sum(p.label == label for p, (_, label) in zip(predictions, examples, strict=True))
    assert right / len(examples) == pytest.approx(config["metrics"]["accuracy"], abs=1e-9)
    if source == "data":  # and none of them was trained on
        texts = [json.loads(line)["text"] for line in (tmp_path / "data.jsonl").open()]
        assert len(texts) - len(examples) == config["data"]["train_examples"] + config[
            "data"].get("validation_examples", 0)


def test_a_file_other_than_the_one_trained_on_is_refused(tmp_path: Path):
    checkpoint = train("train", "data", tmp_path)
    data = tmp_path / "data.jsonl"
    moved = tmp_path / "moved.jsonl"
    shutil.move(data, moved)
    with pytest.raises(DataError, match="no such data file.*give --data PATH"):
        held_out(checkpoint)
    assert len(held_out(checkpoint, moved).examples) == 12  # 20 % of 60
    lines = moved.read_text().splitlines()
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines[:-1] + [lines[0]]) + "\n")  # as many lines, one other
    with pytest.raises(DataError, match="SHA-256 differs"):
        held_out(checkpoint, edited)
    record = read_config(checkpoint)["data"]
    del record["data_sha256"]  # a checkpoint from before the hash: the count still checks
    shorter = tmp_path / "shorter.jsonl"
    shorter.write_text("\n".join(lines[:40]) + "\n")
    with pytest.raises(DataError, match="8 held-out examples where the checkpoint held out 12"):
        held_out_of(record, max_seq=MAX_SEQ, hf=False, data_file=shorter)


def test_a_tagging_task_s_examples_are_tags_and_an_unknown_origin_is_refused():
    held = held_out_of({"task": "tagging", "seed": 0, "n_eval": 4}, max_seq=MAX_SEQ, hf=False)
    text, tags = held.examples[0]
    assert len(tags) == len(text.split(" ")) and set(tags) <= {"unique", "repeated"}
    with pytest.raises(DataError, match="neither a data file nor a task"):
        held_out_of({}, max_seq=MAX_SEQ, hf=False)


def test_the_cli_writes_the_jsonl_once_and_refuses_what_it_cannot_use(tmp_path: Path):
    checkpoint = train("train", "data", tmp_path)
    done = run_cli("held-out", str(checkpoint), "--out", "held.jsonl", "--json", cwd=tmp_path)
    report = parse_json(done)
    rows = [json.loads(line) for line in (tmp_path / "held.jsonl").open()]
    assert report["examples"] == len(rows) == 12 and set(rows[0]) == {"text", "label"}
    assert [(row["text"], row["label"]) for row in rows] == held_out(checkpoint).examples
    again = run_cli("held-out", str(checkpoint), "--out", "held.jsonl", cwd=tmp_path)
    assert_one_line_error(again, "output", "already exists; pass --force")
    assert run_cli("held-out", str(checkpoint), "--out", "held.jsonl", "--force",
                   cwd=tmp_path).returncode == 0
    (tmp_path / "data.jsonl").write_text((tmp_path / "data.jsonl").read_text() + (
        json.dumps({"text": "one more", "label": "alpha"}) + "\n"))
    changed = run_cli("held-out", str(checkpoint), "--out", "new.jsonl", cwd=tmp_path)
    assert_one_line_error(changed, "data", "is not the file the checkpoint trained on")
    assert not (tmp_path / "new.jsonl").exists()
    (tmp_path / "model.onnx").write_bytes(b"not a checkpoint")
    onnx_file = run_cli("held-out", "model.onnx", "--out", "x.jsonl", cwd=tmp_path)
    assert_one_line_error(onnx_file, "checkpoint", "`attndeploy held-out` reads a checkpoint")
