"""Checkpoints: save -> load is bit-identical for every case; every broken checkpoint fails with a
CheckpointError that says what is wrong; loading never unpickles."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from attndeploy import checkpoint as ckpt_module
from attndeploy.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    file_sha256,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from attndeploy.data import WordTokenizer
from attndeploy.errors import CheckpointError, OutputError
from attndeploy.models import build_model
from tests.cases import CASES_BY_ID, TINY_LABELS, TINY_VOCAB, case_params
from tests.helpers import token_batch

pytestmark = pytest.mark.usefixtures("torch_defaults")

LABELS = tuple(f"label{i}" for i in range(TINY_LABELS))
TOKENIZER = WordTokenizer([WordTokenizer.PAD, WordTokenizer.UNK,
                           *(f"w{i}" for i in range(TINY_VOCAB - 2))])


def _save(model, path, **kwargs):
    return save_checkpoint(model, path, label_names=LABELS, tokenizer=TOKENIZER,
                           data={"task": "unit"}, metrics={"accuracy": 0.5}, **kwargs)


@pytest.fixture
def saved(tmp_path):
    """A saved ganet_mlp checkpoint directory (with a non-trivial gate network)."""
    model = build_model(CASES_BY_ID["ganet_mlp"].config())
    return _save(model, tmp_path / "ckpt")


def _rewrite_weights(path, tensors) -> None:
    """Replace the weights file and record its new SHA-256, so only the tensors are wrong."""
    save_file(tensors, str(path / WEIGHTS_FILE))
    config = json.loads((path / CONFIG_FILE).read_text())
    config["weights_sha256"] = file_sha256(path / WEIGHTS_FILE)
    (path / CONFIG_FILE).write_text(json.dumps(config))


def _edit_config(path, **changes) -> None:
    config = json.loads((path / CONFIG_FILE).read_text())
    config.update(changes)
    (path / CONFIG_FILE).write_text(json.dumps(config))


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("case", case_params("checkpoint"))
def test_save_then_load_gives_bit_identical_outputs(case, tmp_path):
    model = build_model(case.config())
    with torch.no_grad():  # move every parameter off its init so nothing passes by accident
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.eval()
    ids, am = token_batch([9, 4, 1], seed=6)
    expected = model(ids, am, details=True)
    _save(model, tmp_path / "ckpt")
    loaded = read_checkpoint(tmp_path / "ckpt")
    assert not loaded.model.training
    assert loaded.model_config == model.config
    assert loaded.label_names == LABELS and loaded.tokenizer == TOKENIZER
    got = loaded.model(ids, am, details=True)
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key


def test_config_records_metadata_and_the_weights_sha256(saved):
    config = json.loads((saved / CONFIG_FILE).read_text())
    assert config["format"] == "attndeploy-checkpoint" and config["format_version"] == 1
    assert config["labels"] == list(LABELS)
    assert config["model"]["variant"] == "ganet"
    assert config["metrics"] == {"accuracy": 0.5} and config["data"] == {"task": "unit"}
    assert config["weights_sha256"] == file_sha256(saved / WEIGHTS_FILE)
    assert read_checkpoint(saved).weights_sha256 == config["weights_sha256"]


def test_both_files_get_the_modes_the_umask_gives(tmp_path):
    """A server running as another user must read a checkpoint's export folder; safetensors
    itself writes 0600."""
    import os
    import stat

    previous = os.umask(0o022)
    try:
        path = _save(build_model(CASES_BY_ID["standard"].config()), tmp_path / "ckpt")
    finally:
        os.umask(previous)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o644, name


def test_load_checkpoint_returns_the_model_in_eval_mode(saved):
    model = load_checkpoint(saved)
    assert not model.training and model.is_gated


def test_loading_never_unpickles(saved, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("checkpoint loading must not unpickle")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    loaded = read_checkpoint(saved)
    assert loaded.model.is_gated


# ----------------------------------------------------------------------------- saving


def test_an_existing_output_directory_is_refused_without_force(saved):
    before = file_sha256(saved / WEIGHTS_FILE)
    other = build_model(CASES_BY_ID["ganet_mlp"].config())
    with pytest.raises(CheckpointError, match="already exists; pass --force"):
        _save(other, saved)
    assert file_sha256(saved / WEIGHTS_FILE) == before


def test_force_replaces_an_existing_checkpoint(saved):
    torch.manual_seed(99)
    other = build_model(CASES_BY_ID["standard"].config())
    _save(other, saved, force=True)
    assert read_checkpoint(saved).model_config.variant == "standard"
    assert sorted(p.name for p in saved.parent.iterdir()) == ["ckpt"]  # no temp folders left


def test_label_count_must_match_the_model(tmp_path):
    model = build_model(CASES_BY_ID["standard"].config())
    with pytest.raises(CheckpointError, match="2 label names for a model with 3 labels"):
        save_checkpoint(model, tmp_path / "ckpt", label_names=("a", "b"))
    assert not (tmp_path / "ckpt").exists()


def test_a_failed_save_leaves_no_partial_directory(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt_module, "save_file", fail)
    model = build_model(CASES_BY_ID["standard"].config())
    with pytest.raises(OutputError, match="disk full"):
        _save(model, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- broken checkpoints


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(tmp_path / "nowhere")


def test_missing_config_json(saved):
    (saved / CONFIG_FILE).unlink()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        read_checkpoint(saved)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "is not valid JSON"),
        (b"\xff\xfe\x00garbage", "is not valid JSON"),
        ('["a list"]', "not an attndeploy checkpoint config"),
        ('{"format": "something-else"}', "not an attndeploy checkpoint config"),
        ('{"format": "attndeploy-checkpoint", "format_version": 2}', "format_version 2"),
    ],
    ids=["truncated-json", "binary", "list", "wrong-format", "future-version"],
)
def test_corrupt_config_json(saved, text, message):
    target = saved / CONFIG_FILE
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(saved)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"model": None}, "must be a JSON object"),
        ({"model": {"vocab_size": 50}}, "incomplete"),
        ({"model": "ganet"}, "must be a JSON object"),
        ({"labels": ["only-one"]}, "1 labels for 3 classes"),
        ({"tokenizer": {"type": "bpe"}}, "unknown tokenizer type"),
    ],
    ids=["no-model", "incomplete-model", "model-string", "label-count", "tokenizer"],
)
def test_config_json_that_does_not_describe_a_model(saved, changes, message):
    _edit_config(saved, **changes)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(saved)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("d_model", "wide", "d_model must be of type int"),
        ("n_heads", 3, "divisible by n_heads"),
        ("variant", "flash", "unknown variant 'flash'"),
        ("ganet", {"temperature": "hot"}, "temperature must be of type float"),
    ],
)
def test_invalid_model_fields_in_config_json(saved, field, value, message):
    config = json.loads((saved / CONFIG_FILE).read_text())
    config["model"][field] = value
    (saved / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(saved)


def test_missing_weights_file(saved):
    (saved / WEIGHTS_FILE).unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        read_checkpoint(saved)


def test_truncated_weights_fail_the_sha256_check(saved):
    data = (saved / WEIGHTS_FILE).read_bytes()
    (saved / WEIGHTS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="does not match the SHA-256"):
        read_checkpoint(saved)


@pytest.mark.parametrize("cut", [0, 7, 100, -16], ids=["empty", "header-cut", "body-cut",
                                                         "tail-cut"])
def test_truncated_weights_with_a_matching_sha256_are_reported_corrupt(saved, cut):
    data = (saved / WEIGHTS_FILE).read_bytes()
    (saved / WEIGHTS_FILE).write_bytes(data[:cut])
    _edit_config(saved, weights_sha256=file_sha256(saved / WEIGHTS_FILE))
    with pytest.raises(CheckpointError, match="is corrupt"):
        read_checkpoint(saved)


def test_weights_of_another_model_fail_the_sha256_check(saved, tmp_path):
    torch.manual_seed(7)
    other = _save(build_model(CASES_BY_ID["ganet_mlp"].config()), tmp_path / "other")
    (saved / WEIGHTS_FILE).write_bytes((other / WEIGHTS_FILE).read_bytes())
    with pytest.raises(CheckpointError, match="does not match the SHA-256 recorded"):
        read_checkpoint(saved)


def test_a_tensor_with_the_wrong_shape_is_named(saved):
    tensors = load_file(str(saved / WEIGHTS_FILE))
    tensors["blocks.1.ffn.0.weight"] = torch.zeros(5, 5)
    _rewrite_weights(saved, tensors)
    with pytest.raises(CheckpointError, match=r"'blocks\.1\.ffn\.0\.weight' has shape \[5, 5\]"):
        read_checkpoint(saved)


def test_a_tensor_with_the_wrong_dtype_is_named(saved):
    tensors = load_file(str(saved / WEIGHTS_FILE))
    tensors["head.classify.bias"] = tensors["head.classify.bias"].double()
    _rewrite_weights(saved, tensors)
    with pytest.raises(CheckpointError, match=r"'head\.classify\.bias' .* torch\.float64"):
        read_checkpoint(saved)


def test_a_missing_tensor_is_named(saved):
    tensors = load_file(str(saved / WEIGHTS_FILE))
    del tensors["gates.network.score.weight"]
    _rewrite_weights(saved, tensors)
    with pytest.raises(CheckpointError, match=r"'gates\.network\.score\.weight' is missing"):
        read_checkpoint(saved)


def test_an_unexpected_tensor_is_named(saved):
    tensors = load_file(str(saved / WEIGHTS_FILE))
    tensors["blocks.9.extra"] = torch.zeros(2)
    _rewrite_weights(saved, tensors)
    with pytest.raises(CheckpointError, match=r"'blocks\.9\.extra' is not part of"):
        read_checkpoint(saved)


@pytest.mark.parametrize("value", [None, "", 42], ids=["null", "empty", "number"])
def test_a_config_without_a_weights_sha256_is_refused(saved, value):
    _edit_config(saved, weights_sha256=value)
    with pytest.raises(CheckpointError, match="records no weights_sha256"):
        read_checkpoint(saved)


# ----------------------------------------------------------------------------- tampered sizes
# config.json is not covered by the weights hash: its sizes are bounded before anything is built,
# and the weights' header is compared with a meta-device model before anything is allocated.


def _refuse_loading(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the weights must not be loaded before their shapes are checked")

    monkeypatch.setattr(ckpt_module, "load_file", refuse)


def _set_model_field(path, field, value) -> None:
    config = json.loads((path / CONFIG_FILE).read_text())
    section, _, name = field.rpartition(".")
    (config["model"][section] if section else config["model"])[name] = value
    (path / CONFIG_FILE).write_text(json.dumps(config))


def test_a_vocab_size_beyond_the_limit_fails_before_any_model_is_built(saved, monkeypatch):
    _refuse_loading(monkeypatch)
    monkeypatch.setattr(ckpt_module, "build_model", _refuse_loading)  # not even on meta
    _set_model_field(saved, "vocab_size", 10**12)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(saved)
    message = str(info.value)
    assert "\n" not in message
    assert "model vocab_size is 1,000,000,000,000, above the limit of 10,000,000" in message


def test_a_tampered_vocab_size_within_the_limit_fails_on_the_header_before_allocating(
    saved, monkeypatch
):
    _refuse_loading(monkeypatch)
    _set_model_field(saved, "vocab_size", 10**7)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(saved)
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith(
        f"tensor 'embed.weight' has shape [{TINY_VOCAB}, 16] torch.float32, the config expects "
        "[10000000, 16] torch.float32 (from its vocab_size 10000000)"
    )


@pytest.mark.parametrize(
    "field, value, tensor, sizes",
    [
        ("d_model", 32, "gates.network.body.0.weight", "d_model 32"),
        ("d_ff", 64, "blocks.0.ffn.0.weight", "d_ff 64"),
        ("num_labels", 3 + 2, "head.classify.weight", "num_labels 5"),
        ("ganet.aux_hidden", 4, "gates.network.body.0.weight", "ganet.aux_hidden 4"),
    ],
)
def test_a_shape_mismatch_names_the_config_sizes_that_disagree_with_the_weights(
    saved, monkeypatch, field, value, tensor, sizes
):
    _refuse_loading(monkeypatch)
    _set_model_field(saved, field, value)
    if field == "num_labels":
        _edit_config(saved, labels=[*LABELS, "x", "y"])
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(saved)
    assert f"tensor {tensor!r} has shape" in str(info.value)
    assert str(info.value).endswith(f"(from its {sizes})")


@pytest.mark.parametrize(
    "field", [*ckpt_module.MODEL_LIMITS, *(".".join(key) for key in ckpt_module.SUB_LIMITS)]
)
def test_every_model_size_is_bounded_naming_the_field_and_the_limit(saved, monkeypatch, field):
    monkeypatch.setattr(ckpt_module, "build_model", _refuse_loading)
    limits = {**ckpt_module.MODEL_LIMITS,
              **{".".join(key): value for key, value in ckpt_module.SUB_LIMITS.items()}}
    _set_model_field(saved, field, limits[field] + 1)
    with pytest.raises(CheckpointError,
                       match=rf"model {field} is [\d,]+, above the limit of {limits[field]:,}"):
        read_checkpoint(saved)


def test_a_tokenizer_larger_than_the_model_vocabulary_is_refused(saved):
    config = json.loads((saved / CONFIG_FILE).read_text())
    config["tokenizer"]["vocab"].append("one-word-too-many")
    (saved / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=rf"{TINY_VOCAB + 1} words, more than the model's "
                                              rf"vocab_size {TINY_VOCAB}"):
        read_checkpoint(saved)


def test_an_oversized_config_json_is_refused_before_it_is_parsed(saved, monkeypatch):
    size = (saved / CONFIG_FILE).stat().st_size
    monkeypatch.setattr(ckpt_module, "MAX_CONFIG_BYTES", size - 1)
    monkeypatch.setattr(json, "loads", _refuse_loading)
    with pytest.raises(CheckpointError, match=rf"is {size:,} bytes, more than the {size - 1:,}"):
        read_checkpoint(saved)


def _replace_header(path, header: bytes, length: int | None = None) -> None:
    body = (length if length is not None else len(header)).to_bytes(8, "little") + header
    (path / WEIGHTS_FILE).write_bytes(body)
    _edit_config(path, weights_sha256=file_sha256(path / WEIGHTS_FILE))


def test_a_weights_header_claiming_an_absurd_size_is_refused(saved, monkeypatch):
    _refuse_loading(monkeypatch)
    _replace_header(saved, b"{}", length=1 << 40)
    with pytest.raises(CheckpointError, match=r"header claims 1,099,511,627,776 bytes, more than"):
        read_checkpoint(saved)


def test_a_weights_header_that_is_not_json_is_reported_corrupt(saved, monkeypatch):
    _refuse_loading(monkeypatch)
    _replace_header(saved, b"not json at all")
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt: .*JSON"):
        read_checkpoint(saved)


def test_shape_checks_read_the_header_only(saved, monkeypatch):
    """A wrong shape is found from the header: neither the weights nor the real model exist."""
    tensors = load_file(str(saved / WEIGHTS_FILE))
    tensors["blocks.1.ffn.0.weight"] = torch.zeros(5, 5)
    _rewrite_weights(saved, tensors)
    _refuse_loading(monkeypatch)
    with pytest.raises(CheckpointError, match=r"'blocks\.1\.ffn\.0\.weight' has shape \[5, 5\]"):
        read_checkpoint(saved)


# ----------------------------------------------------------------------------- edited config.json


def _renamed_first_word(config):
    config["tokenizer"]["vocab"][2] = "renamed"


@pytest.mark.parametrize("edit", [
    lambda c: c["model"].update(n_heads=1),  # same tensors, another model
    lambda c: c["model"]["ganet"].update(temperature=0.5),
    lambda c: c.update(labels=[*LABELS[:-1], "renamed"]),
    _renamed_first_word,
], ids=["n_heads", "gate-temperature", "label-name", "tokenizer-word"])
def test_an_edit_that_still_fits_the_weights_is_refused(saved, edit):
    config = json.loads((saved / CONFIG_FILE).read_text())
    edit(config)
    (saved / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="was edited after training"):
        read_checkpoint(saved)


def test_the_notes_may_be_edited_and_the_file_reformatted(saved):
    config = json.loads((saved / CONFIG_FILE).read_text())
    config.update(metrics={"accuracy": 0.99, "note": "re-evaluated"}, data={"task": "moved"},
                  training={"steps": 1})
    (saved / CONFIG_FILE).write_text(json.dumps(config, indent=None, sort_keys=True))
    assert read_checkpoint(saved).metadata["metrics"]["note"] == "re-evaluated"


def test_a_checkpoint_written_before_the_record_is_read_without_it(saved):
    _rewrite_weights(saved, load_file(str(saved / WEIGHTS_FILE)))  # no header metadata
    _edit_config(saved, labels=[*LABELS[:-1], "renamed"])
    assert read_checkpoint(saved).label_names[-1] == "renamed"
