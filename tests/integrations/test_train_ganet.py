"""Fine-tuning a converted Hugging Face encoder with GA-Net (`attndeploy train --hf-model
--variant ganet`): its preset, the dense-gate teacher, and the gate threshold's calibration,
which reads the gate scores at the token lookup."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attndeploy.checkpoint import read_checkpoint  # noqa: E402
from attndeploy.errors import ConfigError  # noqa: E402
from attndeploy.integrations.hf_train import train_hf_checkpoint  # noqa: E402
from attndeploy.train import TrainConfig  # noqa: E402

from .hf_models import pretrained_folder  # noqa: E402


def test_a_pretrained_ganet_can_learn_from_its_dense_gate_run(tmp_path: Path):
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} {'good' if i % 2 else 'bad'} day",
                                          "label": i % 2}) for i in range(40)) + "\n")
    folder = pretrained_folder(tmp_path / "pre")
    config = TrainConfig(steps=4, batch_size=16, learning_rate=5e-5, distill=0.5,
                         density_target=0.45)
    result = train_hf_checkpoint(folder, "ganet", tmp_path / "ckpt", data_file=data,
                                 max_seq=16, progress=False, train_config=config)
    teacher = result.summary["teacher"]
    assert teacher["weight"] == 0.5 and 0.0 <= teacher["accuracy"] <= 1.0
    assert result.summary["seconds"] >= teacher["seconds"]
    with pytest.raises(ConfigError, match="applies to gated variants"):
        train_hf_checkpoint(folder, "standard", tmp_path / "std", data_file=data, max_seq=16,
                            progress=False, train_config=config)


def test_a_pretrained_ganet_takes_its_preset(tmp_path: Path, monkeypatch, capsys):
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(pretrained_folder(tmp_path / "pre")),
        "--variant", "ganet", "--data", str(data), "--max-seq", "16", "--steps", "1", "--out",
        str(tmp_path / "ckpt"), "--json"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 0, capsys.readouterr().err
    ckpt = read_checkpoint(tmp_path / "ckpt")
    options, used = ckpt.model_config.options, ckpt.metadata["training"]["config"]
    assert (options["relaxation"], options["temperature"]) == ("hard_concrete", 0.5)
    assert options["gated_layers"] == "upper_third"  # the lower two thirds attend every key
    assert (used["new_learning_rate"], used["density_target"], used["learning_rate"]) == (
        5e-3, 0.6, 5e-5)
    assert used["density_calibrate"] == 0.6  # the threshold moves to the target at the end
    assert '"probe_accuracy"' in capsys.readouterr().out  # the probe beside naive Bayes


def test_a_density_target_given_moves_the_preset_s_calibration_with_it(tmp_path: Path,
                                                                        monkeypatch, capsys):
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    folder = pretrained_folder(tmp_path / "pre")
    for name, extra, calibrated in (("target", ["--density-target", "0.4"], 0.4),
                                    ("both", ["--density-target", "0.4",
                                              "--density-calibrate", "0.5"], 0.5)):
        monkeypatch.setattr("sys.argv", [
            "attndeploy", "train", "--hf-model", str(folder), "--variant", "ganet", "--data",
            str(data), "--max-seq", "16", "--steps", "1", "--out", str(tmp_path / name),
            "--json", *extra])
        with pytest.raises(SystemExit) as info:
            cli_app.main()
        assert info.value.code == 0, capsys.readouterr().err
        used = read_checkpoint(tmp_path / name).metadata["training"]["config"]
        assert (used["density_target"], used["density_calibrate"]) == (0.4, calibrated)
        assert used["min_steps"] == 300  # no --max-epochs: the step floor stays


def test_max_epochs_given_is_obeyed_on_a_small_set(tmp_path: Path, monkeypatch, capsys):
    """The step floor (`min_steps`) sizes the preset's epochs to the set; a user's
    --max-epochs is not raised by it."""
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(pretrained_folder(tmp_path / "pre")),
        "--variant", "standard", "--data", str(data), "--max-seq", "16", "--max-epochs", "1",
        "--out", str(tmp_path / "ckpt"), "--json"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 0, capsys.readouterr().err
    training = read_checkpoint(tmp_path / "ckpt").metadata["training"]
    assert (training["config"]["min_steps"], training["config"]["max_epochs"]) == (0, 1)
    assert training["steps_done"] == 1  # 24 training texts: one batch, one epoch


def test_train_distills_a_pretrained_ganet_when_asked(tmp_path: Path, monkeypatch, capsys):
    """`train --hf-model --distill W` reaches the library: the dense-gate teacher runs first and
    the checkpoint records it; the preset leaves it off."""
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(pretrained_folder(tmp_path / "pre")),
        "--variant", "ganet", "--data", str(data), "--max-seq", "16", "--steps", "1",
        "--distill", "0.5", "--out", str(tmp_path / "ckpt"), "--json"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 0, capsys.readouterr().err
    training = read_checkpoint(tmp_path / "ckpt").metadata["training"]
    assert training["config"]["distill"] == 0.5
    assert training["teacher"]["weight"] == 0.5


def test_a_pretrained_ganet_calibrates_its_gate_threshold_on_the_training_texts(tmp_path: Path):
    """`density_calibrate` moves the converted model's gate threshold at the end, as the built-in
    loop does; without a validation split it reads the training texts, never the held-out ones,
    and the checkpoint keeps the moved threshold."""
    from attndeploy.integrations.hf_data import load_hf_training_data, load_source
    from attndeploy.train import evaluate

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} {'good' if i % 2 else 'bad'} day "
                                                  f"{'amber' if i % 3 else 'cobalt'} bravo",
                                          "label": i % 2}) for i in range(60)) + "\n")
    folder = pretrained_folder(tmp_path / "pre")
    config = TrainConfig(steps=12, batch_size=16, learning_rate=5e-5, new_learning_rate=5e-2,
                         density_target=0.45, density_calibrate=0.5)
    result = train_hf_checkpoint(folder, "ganet", tmp_path / "ckpt", data_file=data,
                                 max_seq=16, progress=False, train_config=config)
    calibration = result.summary["gate_calibration"]
    assert calibration["gate_shift"] != 0.0
    assert calibration["density_before"] != calibration["density_after"]
    assert calibration["on"] == "training"  # no validation split: never the held-out texts
    source = load_source(folder)
    split = load_hf_training_data(source, data_file=data, max_seq=16, seed=0)
    saved = read_checkpoint(tmp_path / "ckpt").model.eval()
    training_density = evaluate(saved, split.train_set)["density"]
    assert training_density == pytest.approx(calibration["density_after"], abs=1e-6)
    assert training_density <= 0.5


def test_the_cli_passes_density_calibrate_to_a_hugging_face_ganet(tmp_path: Path, monkeypatch,
                                                                  capsys):
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} {'good' if i % 2 else 'bad'} day",
                                          "label": i % 2}) for i in range(40)) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(pretrained_folder(tmp_path / "pre")),
        "--variant", "ganet", "--data", str(data), "--max-seq", "16", "--steps", "3",
        "--new-lr", "0.05", "--density-calibrate", "0.5", "--out", str(tmp_path / "ckpt"),
        "--json"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 0, capsys.readouterr().err
    training = read_checkpoint(tmp_path / "ckpt").metadata["training"]
    assert training["config"]["density_calibrate"] == 0.5
    assert training["gate_calibration"]["density_after"] <= 0.5


def test_a_converted_ganet_scores_its_gates_as_its_forward_pass_decides_them(tmp_path: Path):
    """`gate_scores` (what the threshold calibration reads) scores the token lookup without
    running the encoder layers: it equals the eval-mode pass's gate logits, `open_token_ids`
    held open."""
    from attndeploy.integrations.hf_data import load_hf_training_data, load_source
    from attndeploy.integrations.hf_train import build_classifier

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} amber day", "label": i % 2})
                              for i in range(20)) + "\n")
    source = load_source(pretrained_folder(tmp_path / "pre"))
    hf_data = load_hf_training_data(source, data_file=data, max_seq=16)
    tokenizer = hf_data.tokenizer
    model = build_classifier(source, hf_data, "ganet",
                             {"open_token_ids": (tokenizer.cls_id, tokenizer.sep_id)}, max_seq=16)
    with torch.no_grad():  # a gate network that scores tokens differently (it starts open)
        for parameter in model.model.bert.embeddings.gate_network.parameters():
            parameter.normal_()
    model.eval()
    ids, mask = (torch.from_numpy(a) for a in tokenizer.encode_batch(
        ["w1 amber day", "w2 day"], max_seq=16))
    scores = model.gate_scores(ids, mask)
    with torch.no_grad():
        decided = model(ids, mask, details=True)["gate_logits"]
    torch.testing.assert_close(scores, decided)
    framing = (ids == tokenizer.cls_id) | (ids == tokenizer.sep_id)
    assert bool((scores[framing] > 0).all()) and bool((scores[~framing & (mask != 0)] < 0).any())


SHORT_WORDS = ("kernel", "driver", "font", "glyph", "game", "puzzle", "audio", "codec",
               "library", "tool", "server", "client", "viewer", "editor", "data", "plugin")


def _short_texts(path: Path, count: int) -> Path:
    """`count` texts of 5 to 12 words, as one-line package descriptions are; the label is the
    topic of the first word."""
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(count):
        words = rng.choices(SHORT_WORDS, k=rng.randint(5, 12))
        rows.append({"text": " ".join(words), "label": SHORT_WORDS.index(words[0]) // 4})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _short_text_folder(folder: Path, data: Path) -> Path:
    """A tiny pretrained BERT whose WordPiece vocabulary holds the short texts' words."""
    import transformers

    from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer

    texts = [json.loads(line)["text"] for line in data.read_text().splitlines()]
    tokenizer = WordPieceTokenizer.train(texts)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32,
                                     num_hidden_layers=3, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(str(folder))
    tokenizer._tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_ganet_holds_its_density_target_on_short_texts(tmp_path: Path):
    """Issue #54: on texts of 5-12 words the pretrained GA-Net preset ended far from its density
    target (0.13 against 0.6): the penalty only pushes gates closed, and λ falls too slowly for a
    short run once the density is under the aim. The preset now moves the gate threshold to its
    target on the training texts after training; the held-out density lands within 0.1."""
    from attndeploy.training.config import defaults_for

    data = _short_texts(tmp_path / "short.jsonl", 120)
    folder = _short_text_folder(tmp_path / "pre", data)
    preset = defaults_for(real_text=True, pretrained=True).training_for("ganet")
    config = replace(preset, min_steps=0, max_epochs=3, batch_size=16)  # a short run, fast
    result = train_hf_checkpoint(folder, "ganet", tmp_path / "ckpt", data_file=data,
                                 max_seq=16, progress=False, train_config=config,
                                 options={"relaxation": "hard_concrete", "temperature": 0.5,
                                          "gated_layers": "upper_third"})
    assert result.metrics["density_target"] == 0.6
    assert abs(result.metrics["density"] - 0.6) <= 0.1, result.summary.get("gate_calibration")
    assert "density_shortfall" not in result.summary
    assert result.summary["gate_calibration"]["on"] == "training"
