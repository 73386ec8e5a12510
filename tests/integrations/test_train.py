"""Fine-tuning converted HF encoders (`attndeploy train --hf-model`): a tiny BERT config learns
the built-in `sparse_evidence` task rendered as text, with a WordPiece tokenizer trained on it;
the built-in loop's machinery applies (epochs, a schedule that ends at the last step the run can
take, validation-split selection and patience, the bag-of-words baseline); local pretrained
folders are read without the Hub; bad sources fail with one clear line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import transformers  # noqa: E402

from attndeploy.checkpoint import read_checkpoint  # noqa: E402
from attndeploy.cli.train_hf import train_hf_command  # noqa: E402
from attndeploy.errors import CheckpointError, ConfigError, DataError  # noqa: E402
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer  # noqa: E402
from attndeploy.integrations.hf_train import train_hf_checkpoint  # noqa: E402
from attndeploy.train import TrainConfig  # noqa: E402
from attndeploy.variants.evolving.config import EvolvingConfig  # noqa: E402

from .hf_models import pretrained_folder  # noqa: E402

CHANCE = 0.25  # sparse_evidence has 4 balanced classes
MIN_ACCURACY = 0.9


def tiny_bert(folder: Path) -> Path:
    """A `save_pretrained` folder holding a config only (random weights when built)."""
    transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=80,
                            ).save_pretrained(str(folder))
    return folder



@pytest.mark.slow
@pytest.mark.parametrize("variant", ["evolving", "ganet"])
def test_a_tiny_bert_learns_sparse_evidence_as_text(tmp_path: Path, variant: str):
    result = train_hf_checkpoint(
        tiny_bert(tmp_path / "bert"), variant, tmp_path / "ckpt", task="sparse_evidence",
        train_config=TrainConfig(steps=120, batch_size=32, learning_rate=3e-3),
        n_train=1500, n_eval=300, max_seq=72, progress=False,
    )
    assert result.metrics["accuracy"] >= MIN_ACCURACY > CHANCE
    ckpt = read_checkpoint(tmp_path / "ckpt")
    assert ckpt.metadata["metrics"] == result.metrics
    assert ckpt.metadata["data"]["tokenizer"] == "wordpiece trained on the training texts"
    assert ckpt.model_config.vocab_size == len(ckpt.tokenizer)  # the model took the vocabulary
    ids, mask = ckpt.tokenizer.encode_batch(["w1 w2 alpha w3", "cobalt w4 w5"], max_seq=72)
    with torch.no_grad():
        logits = ckpt.model(torch.from_numpy(ids), torch.from_numpy(mask))["logits"]
    predicted = [ckpt.label_names[i] for i in logits.argmax(-1).tolist()]
    assert predicted == ["alpha", "charlie"]



def test_the_cli_function_trains_from_a_jsonl_file_and_prints_json(tmp_path: Path, capsys):
    data = tmp_path / "data.jsonl"
    rows = [{"text": f"w{i} good day", "label": "pos"} if i % 2 else
            {"text": f"w{i} bad day", "label": "neg"} for i in range(40)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    train_hf_command(
        hf_model=tiny_bert(tmp_path / "bert"), variant="evolving",
        variant_config=EvolvingConfig(alpha=0.3, beta=0.5), out=tmp_path / "ckpt", task=None,
        data=data, max_seq=16, steps=3, batch_size=8, lr=1e-3, seed=0, n_train=0, n_eval=0,
        eval_fraction=0.25, max_seconds=None, force=False, json_output=True,
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["checkpoint"] == str(tmp_path / "ckpt")
    assert printed["metrics"]["examples"] == 10
    # --data defaults: a validation split (10 % of the 30 kept) selects; the baseline is beside
    assert printed["training"]["selected_on"] == "validation"
    assert printed["training"]["steps_done"] == 3 and printed["training"]["stopped_by"] == "steps"
    assert {"baseline_accuracy", "beats_baseline"} <= set(printed["metrics"])
    ckpt = read_checkpoint(tmp_path / "ckpt")
    assert ckpt.label_names == ("neg", "pos")
    assert ckpt.model_config.options == {"alpha": 0.3, "beta": 0.5, "negative_slope": 0.0,
                                         "evolving_layers": "all"}
    assert ckpt.metadata["data"]["data_file"] == str(data)



def test_a_pretrained_folder_keeps_its_encoder_and_its_tokenizer(tmp_path: Path):
    """save_pretrained weights (safetensors) and tokenizer.json, read locally; a new head."""
    folder = tmp_path / "pretrained"
    tokenizer = WordPieceTokenizer.train(["w1 w2 alpha amber bravo cobalt w3 w4"] * 3)
    config = transformers.BertConfig(vocab_size=len(tokenizer) + 7, hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=80)
    encoder = transformers.BertForMaskedLM(config)
    encoder.save_pretrained(str(folder))
    tokenizer._tokenizer.save(str(folder / "tokenizer.json"))
    saved = json.loads((folder / "config.json").read_text())  # a Hub kernel is never fetched
    saved["attn_implementation"] = "kernels-community/flash-attn"
    (folder / "config.json").write_text(json.dumps(saved))
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 5} alpha", "label": i % 2})
                              for i in range(12)))
    result = train_hf_checkpoint(
        folder, "qvi", tmp_path / "ckpt", data_file=data,
        train_config=TrainConfig(steps=1, batch_size=4, learning_rate=1e-9), max_seq=16,
        progress=False,
    )
    ckpt = read_checkpoint(tmp_path / "ckpt")
    assert ckpt.tokenizer == tokenizer
    assert ckpt.model_config.vocab_size == config.vocab_size
    assert ckpt.metadata["data"]["pretrained"] is True
    weights = dict(ckpt.model.model.named_parameters())
    torch.testing.assert_close(weights["bert.embeddings.word_embeddings.weight"],
                               encoder.bert.embeddings.word_embeddings.weight, atol=1e-6,
                               rtol=0)
    assert result.model.config.architecture == "BertForSequenceClassification"



def test_sources_that_cannot_be_used_fail_with_one_line(tmp_path: Path):
    def train(source: Path, **kwargs):
        return train_hf_checkpoint(source, "evolving", tmp_path / "out", progress=False,
                                   train_config=TrainConfig(steps=1), n_train=4, n_eval=4,
                                   **kwargs)

    with pytest.raises(DataError, match="never downloads"):
        train(Path("bert-base-uncased"))
    gpt = tmp_path / "gpt"
    transformers.GPT2Config(n_layer=1).save_pretrained(str(gpt))
    with pytest.raises(ConfigError, match="model_type 'gpt2'.*bert, roberta, distilbert"):
        train(gpt)
    pickled = tiny_bert(tmp_path / "pickled")
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(CheckpointError, match="never unpickles"):
        train(pickled)
    with pytest.raises(DataError, match="tags tokens"):
        train(tiny_bert(tmp_path / "bert"), task="tagging")
    with pytest.raises(DataError, match="raise max_seq"):
        train(tmp_path / "bert", max_seq=20)



def test_attndeploy_train_hf_model_reaches_the_hf_path_with_the_variant_options(
        tmp_path: Path, monkeypatch, capsys):
    """`attndeploy train --hf-model` in process: the options of the command reach the fine-tune."""
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    rows = [{"text": f"w{i} {'good' if i % 2 else 'bad'} day", "label": "pos" if i % 2 else "neg"}
            for i in range(40)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(tiny_bert(tmp_path / "bert")), "--variant",
        "evolving", "--alpha", "0.3", "--beta", "0.5", "--data", str(data), "--max-seq", "16",
        "--steps", "3", "--batch-size", "8", "--out", str(tmp_path / "ckpt"), "--json",
        "--max-epochs", "7", "--patience", "2", "--weight-decay", "0.03",
        "--label-smoothing", "0.05", "--word-dropout", "0.02", "--val-fraction", "0.25"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["checkpoint"] == str(tmp_path / "ckpt")
    ckpt = read_checkpoint(tmp_path / "ckpt")
    assert ckpt.metadata["hf"]  # an HF checkpoint, not the built-in transformer
    assert ckpt.model_config.options == {"alpha": 0.3, "beta": 0.5, "negative_slope": 0.0,
                                         "evolving_layers": "all"}  # random weights: every layer
    used = ckpt.metadata["training"]["config"]  # every training option reached the fine-tune
    assert (used["max_epochs"], used["patience"], used["weight_decay"], used["label_smoothing"],
            used["word_dropout"]) == (7, 2, 0.03, 0.05, 0.02)


# --------------------------------------------------------------------------- the training loop



def small_run(tmp_path: Path, config: TrainConfig, **kwargs):
    """A tiny BERT on 48 `sparse_evidence` texts (3 steps an epoch at batch 16)."""
    return train_hf_checkpoint(
        tiny_bert(tmp_path / "bert"), "evolving", tmp_path / "ckpt", task="sparse_evidence",
        train_config=config, n_train=48, n_eval=16, n_val=16, max_seq=24, progress=False,
        **kwargs)



def test_epochs_bound_the_run_and_the_schedule_decays_to_zero_at_its_last_step(tmp_path: Path):
    """`steps` as large as the real-text defaults' (1,000,000): the epochs end the run, and the
    cosine schedule must end with them, not at step 1,000,000."""
    peak = 1e-3
    result = small_run(tmp_path, TrainConfig(steps=1_000_000, max_epochs=2, batch_size=16,
                                             warmup_steps=2, learning_rate=peak,
                                             keep_best=True))
    summary = result.summary
    assert summary["steps_per_epoch"] == 3
    assert summary["steps_done"] == summary["horizon_steps"] == 6
    assert summary["stopped_by"] == "epochs"
    rates = [record["learning_rate"] for record in result.history]  # the rate of each step
    assert rates[:3] == pytest.approx([peak / 2, peak, peak])  # warm-up, then the peak
    assert all(later < earlier for earlier, later in zip(rates[2:], rates[3:], strict=False))
    assert rates[-1] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 3 / 4)))
    assert rates[-1] < 0.2 * peak  # decayed: with a horizon of 1,000,000 it would stay ~peak
    # one evaluation per epoch on the validation set; the best one's weights are kept
    assert summary["evaluations"] == 2 and summary["selected_on"] == "validation"
    assert summary["best_epoch"] in {e["epoch"] for e in result.evaluations}
    assert result.metrics["best_step"] in (3, 6)
    ckpt = read_checkpoint(tmp_path / "ckpt")
    assert ckpt.metadata["metrics"]["baseline"] == "naive_bayes_bow"
    assert 0.0 <= ckpt.metadata["metrics"]["baseline_accuracy"] <= 1.0
    assert ckpt.metadata["metrics"]["beats_baseline"] == (
        result.metrics["accuracy"] > result.metrics["baseline_accuracy"])
    assert ckpt.metadata["data"]["validation_examples"] == 16



def test_patience_stops_a_run_that_no_longer_improves(tmp_path: Path):
    """At a learning rate of 1e-30 no fp32 weight moves, so every evaluation equals the first
    and none is better: patience 2 stops the run after the third epoch's evaluation."""
    result = small_run(tmp_path, TrainConfig(steps=1_000_000, max_epochs=10, batch_size=16,
                                             learning_rate=1e-30, patience=2, keep_best=True))
    assert result.summary["stopped_by"] == "patience"
    assert result.summary["evaluations"] == 3
    assert result.summary["steps_done"] == 9  # three epochs of three steps
    assert result.metrics["best_epoch"] == 1



def test_word_dropout_replaces_pieces_by_unk_and_never_the_framing():
    from attndeploy.integrations.hf_train import _drop_pieces

    ids = torch.tensor([[2, 10, 11, 12, 3, 0], [2, 13, 3, 0, 0, 0]])  # [CLS]=2, [SEP]=3
    mask = (ids != 0).long()
    dropped = _drop_pieces(ids, mask, 0.999, 1, torch.tensor([2, 3]),
                           torch.Generator().manual_seed(0))
    assert dropped.tolist() == [[2, 1, 1, 1, 3, 0], [2, 1, 3, 0, 0, 0]]


# --------------------------------------------------------------------------- pretrained weights



def test_pretrained_weights_fine_tune_with_the_pretrained_recipe(tmp_path: Path):
    """No train_config: a folder with weights takes PRETRAINED (AdamW 5e-5, warm-up over 10 %
    of the steps then linear decay to 0, no word dropout, label smoothing, weight average or
    selection: every non-held-out example trains and the last step is kept), and the warm-started
    evolving conversion has its mixing weights whole by the end of the warm-up."""
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} {'good' if i % 2 else 'bad'} day",
                                          "label": "pos" if i % 2 else "neg"})
                              for i in range(50)) + "\n")
    result = train_hf_checkpoint(pretrained_folder(tmp_path / "pre"), "evolving",
                                 tmp_path / "ckpt", data_file=data, max_seq=16, progress=False)
    assert result.model.config.options["alpha"] == 0.3  # the pretrained preset's α and β
    used = result.summary["config"]
    assert (used["learning_rate"], used["schedule"], used["warmup_fraction"]) == (
        5e-5, "linear", 0.1)
    assert (used["word_dropout"], used["label_smoothing"], used["weight_average"],
            used["keep_best"], used["patience"]) == (0.0, 0.0, 0.0, False, None)
    assert result.summary["selected_on"] is None and result.summary["stopped_by"] == "epochs"
    steps = result.summary["steps_done"]
    # 40 training texts are 2 steps an epoch: 4 epochs would be 8 steps, so the recipe sized to
    # the data (training.recipe) trains the 150 epochs that reach its floor of 300 steps
    assert used["max_epochs"] == 150 and steps == result.summary["horizon_steps"] == 300
    assert 0.0 <= result.metrics["probe_accuracy"] <= 1.0  # the frozen encoder's probe beside
    assert result.metrics["probe_l2"] > 0 and "baseline_accuracy" in result.metrics
    rates = [record["learning_rate"] for record in result.history]
    warmup = max(1, round(0.1 * steps))
    assert rates[warmup - 1] == pytest.approx(5e-5)  # the peak right after the warm-up
    assert rates[-1] == pytest.approx(5e-5 * (1 - (steps - 1 - warmup) / (steps - warmup)))
    layers = [m.attention for m in result.model.modules() if hasattr(m, "attention")
              and hasattr(m.attention, "mix")]
    assert layers and all((l.alpha_in_use, l.beta_in_use) == (0.3, 0.5) for l in layers)
    ckpt = read_checkpoint(tmp_path / "ckpt")
    assert ckpt.model_config.options["alpha"] == 0.3 and ckpt.metadata["data"]["pretrained"]
    ids, mask = ckpt.tokenizer.encode_batch(["w1 good day", "w2 bad day"], max_seq=16)
    with torch.no_grad():  # the saved model is the trained one, mixing weights included
        saved = ckpt.model(torch.from_numpy(ids), torch.from_numpy(mask))["logits"]
        trained = result.model(torch.from_numpy(ids), torch.from_numpy(mask))["logits"]
    torch.testing.assert_close(saved, trained)



def test_a_config_only_folder_keeps_the_from_scratch_defaults(tmp_path: Path):
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    result = train_hf_checkpoint(tiny_bert(tmp_path / "bert"), "standard", tmp_path / "ckpt",
                                 data_file=data, max_seq=16, progress=False,
                                 train_config=None, val_fraction=0.2)
    used = result.summary["config"]
    assert used["learning_rate"] == 2e-3 and used["schedule"] == "cosine"  # REAL_TEXT
    assert used["label_smoothing"] == 0.1 and used["keep_best"]
    assert used["min_steps"] == 0  # no step floor: the from-scratch recipe as it was
    assert "probe_accuracy" not in result.metrics  # random weights: nothing to probe



def test_a_model_mid_warm_start_is_not_saved(tmp_path: Path):
    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.transformers import convert
    from attndeploy.integrations.warm_start import set_warm_start_progress

    from .hf_models import LABELS, make_model

    model = convert(make_model("bert", "seq"), "evolving", alpha=0.3, beta=0.5)
    classifier = HFClassifier(model, model_config_of(model, 16))
    set_warm_start_progress(model, 0.5)
    with pytest.raises(ConfigError, match="50% of the way to its variant"):
        save_hf_checkpoint(classifier, tmp_path / "ckpt", label_names=LABELS)
    assert not (tmp_path / "ckpt").exists()
    set_warm_start_progress(model, 1.0)
    save_hf_checkpoint(classifier, tmp_path / "ckpt", label_names=LABELS)
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()



def test_truncate_cuts_a_long_text_to_max_seq_pieces_and_counts_it(tmp_path: Path):
    data = tmp_path / "data.jsonl"
    rows = [{"text": f"w{i % 4} {'good' if i % 2 else 'bad'} day", "label": i % 2}
            for i in range(30)]
    rows[3]["text"] = " ".join(["w1 alpha"] * 40)  # 80 words: more than 16 pieces
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    folder = pretrained_folder(tmp_path / "pre")
    with pytest.raises(DataError, match="more than max_seq=16"):
        train_hf_checkpoint(folder, "standard", tmp_path / "refused", data_file=data,
                            max_seq=16, progress=False, split_seed=0)
    train_hf_checkpoint(folder, "standard", tmp_path / "ckpt", data_file=data, max_seq=16,
                        progress=False, truncate=True, split_seed=0,
                        train_config=TrainConfig(steps=1, batch_size=8))
    cut = read_checkpoint(tmp_path / "ckpt").metadata["data"]["truncated_to_max_seq"]
    assert sum(cut.values()) == 1



def test_the_cli_takes_the_pretrained_evolving_options_unless_given(tmp_path: Path,
                                                                     monkeypatch, capsys):
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    folder = pretrained_folder(tmp_path / "pre")
    for name, extra, want in (
            ("preset", [], (0.3, 0.5, "upper_half")),
            ("given", ["--alpha", "0.2", "--beta", "0.4", "--option", "evolving_layers=all"],
             (0.2, 0.4, "all"))):
        monkeypatch.setattr("sys.argv", [
            "attndeploy", "train", "--hf-model", str(folder), "--variant", "evolving", "--data",
            str(data), "--max-seq", "16", "--steps", "1", "--out", str(tmp_path / name),
            "--json", *extra])
        with pytest.raises(SystemExit) as info:
            cli_app.main()
        assert info.value.code == 0, capsys.readouterr().err
        options = read_checkpoint(tmp_path / name).model_config.options
        assert (options["alpha"], options["beta"], options["evolving_layers"]) == want



def test_pretrained_weights_without_a_tokenizer_are_warned_about(tmp_path: Path, monkeypatch,
                                                                  capsys):
    from attndeploy.cli import app as cli_app

    folder = pretrained_folder(tmp_path / "pre")
    (folder / "tokenizer.json").unlink()
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(folder), "--data", str(data), "--max-seq",
        "16", "--steps", "1", "--out", str(tmp_path / "ckpt"), "--json"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    err = capsys.readouterr().err
    assert info.value.code == 0, err
    assert "holds pretrained weights but no tokenizer" in err
    assert "piece ids are not the ones the pretrained embedding table was trained with" in err
    assert "LOAD REPORT" not in err and "Loading weights" not in err  # the new head is no news



def test_the_parameters_a_conversion_adds_train_at_their_own_rate(tmp_path: Path):
    """A warm-started GA-Net's gate network is new: at the encoder's 5e-5 its gates never
    closed. `new_learning_rate` gives the variant's own parameters their own group; the
    pretrained weights and the new head keep `learning_rate`."""
    from attndeploy.integrations.hf_data import load_hf_training_data, load_source
    from attndeploy.integrations.hf_train import build_classifier
    from attndeploy.training.parameters import parameter_groups

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} day", "label": i % 2})
                              for i in range(20)) + "\n")
    source = load_source(pretrained_folder(tmp_path / "pre"))
    hf_data = load_hf_training_data(source, data_file=data, max_seq=16)
    model = build_classifier(source, hf_data, "ganet", {}, max_seq=16)
    assert model.new_parameters == {f"model.bert.embeddings.gate_network.{name}" for name in
                                    ("body.0.weight", "body.0.bias", "score.weight",
                                     "score.bias")}
    groups = parameter_groups(model, TrainConfig(learning_rate=5e-5, new_learning_rate=2e-3),
                              model.new_parameters)
    assert [len(g["params"]) for g in groups] == [
        len(list(model.parameters())) - 4, 4]
    assert groups[1]["lr"] == 2e-3 and "lr" not in groups[0]
    assert len(parameter_groups(model, TrainConfig(), model.new_parameters)) == 1



@pytest.mark.parametrize("variant", ["qvi", "evolving"])
def test_a_pretrained_variant_trains_what_the_conversion_added_at_the_new_rate(
        tmp_path: Path, monkeypatch, capsys, variant: str):
    """QVI's maps and Evolving Attention's convs get `new_learning_rate` too: at the encoder's
    rate they barely left their warm start (QVI scored what standard scored at every seed)."""
    from attndeploy.cli import app as cli_app

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i} day", "label": i % 2})
                              for i in range(30)) + "\n")
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(pretrained_folder(tmp_path / "pre")),
        "--variant", variant, "--data", str(data), "--max-seq", "16", "--steps", "1", "--out",
        str(tmp_path / "ckpt"), "--json"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 0, capsys.readouterr().err
    used = read_checkpoint(tmp_path / "ckpt").metadata["training"]["config"]
    assert used["new_learning_rate"] > used["learning_rate"] == 5e-5
