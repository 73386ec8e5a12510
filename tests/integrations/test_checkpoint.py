"""Converted HF models as attndeploy checkpoints: `read_checkpoint` rebuilds them exactly and
refuses what does not fit; the WordPiece tokenizer they carry round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from safetensors.torch import load_file, save_file  # noqa: E402

from attndeploy.checkpoint import read_checkpoint  # noqa: E402
from attndeploy.errors import CheckpointError, DataError  # noqa: E402
from attndeploy.fsutil import file_sha256  # noqa: E402
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer  # noqa: E402

from .hf_models import LABELS, MODEL_TYPES, padded_batch, save_converted_checkpoint  # noqa: E402

TEXTS = ["w1 w2 alpha amber", "bravo w3 w4, w5!", "w5 charlie cobalt w1"] * 5


@pytest.mark.parametrize("variant", ["ganet", "evolving"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_checkpoint_reads_back_as_the_same_model(tmp_path: Path, model_type: str,
                                                    variant: str):
    tokenizer = WordPieceTokenizer.train(TEXTS)
    path = save_converted_checkpoint(tmp_path / "ckpt", model_type, variant, tokenizer=tokenizer)
    first, second = read_checkpoint(path), read_checkpoint(path)
    ids, mask = padded_batch(3, 8)
    with torch.no_grad():
        a, b = first.model(ids, mask), second.model(ids, mask)
    assert set(a) == ({"logits", "gates"} if variant == "ganet" else {"logits"})
    for key in a:
        assert torch.equal(a[key], b[key])
    assert not first.model.training
    assert first.label_names == LABELS
    assert first.tokenizer == tokenizer
    summary = first.metadata["model"]
    assert summary == first.model_config.to_dict()
    assert (summary["family"], summary["variant"], summary["n_layers"]) == ("hf", variant, 2)
    assert first.metadata["hf"]["architecture"] == first.model.model.__class__.__name__


def test_details_give_gate_logits_and_in_training_the_density_penalty(tmp_path: Path):
    ckpt = read_checkpoint(save_converted_checkpoint(tmp_path / "c", "bert", "ganet"))
    ids, mask = padded_batch(2, 6)
    out = ckpt.model(ids, mask, details=True)
    assert set(out) == {"logits", "gates", "gate_logits"}
    assert torch.equal(out["gates"], out["gates"] & mask.bool())
    ckpt.model.train()
    out = ckpt.model(ids, mask, details=True)
    assert 0 < float(out["density_penalty"].detach()) < 1


def test_the_model_refuses_inputs_it_cannot_take(tmp_path: Path):
    model = read_checkpoint(save_converted_checkpoint(tmp_path / "c", "bert", "qvi")).model
    ids, mask = padded_batch(2, 6)
    with pytest.raises(DataError, match="no real token"):
        model(ids, torch.zeros_like(mask))
    with pytest.raises(DataError, match="exceeds the model's maximum"):
        model(torch.ones(1, 40, dtype=torch.long), torch.ones(1, 40, dtype=torch.long))
    with pytest.raises(DataError, match="token ids"):
        model(ids + 1000, mask)


def _rewrite(path: Path, edit) -> None:
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda c: c["hf"].update(architecture="GPT2Model"), "architecture must be one of"),
        (lambda c: c["hf"]["config"].update(hidden_size=10**9), "above the limit"),
        (lambda c: c["hf"]["config"].update(num_hidden_layers=3), "is missing"),
        (lambda c: c["hf"]["config"].update(hidden_size=64), "has shape"),
        (lambda c: c["hf"].update(variant="qvi", options={}), "is missing"),
        (lambda c: c["hf"]["options"].update(alpha=7.0), "alpha"),
        (lambda c: c.update(labels=["a", "b"]), "2 labels for 3 classes"),
        (lambda c: c["tokenizer"].update(type="word"), "wordpiece"),
    ],
    ids=["architecture", "limit", "more-layers", "wider", "variant", "option", "labels",
         "tokenizer"],
)
def test_a_config_that_does_not_fit_the_weights_is_refused(tmp_path: Path, edit, match):
    path = save_converted_checkpoint(tmp_path / "c", "bert", "evolving",
                                     tokenizer=WordPieceTokenizer.train(TEXTS))
    _rewrite(path, edit)
    with pytest.raises(CheckpointError, match=match):
        read_checkpoint(path)


def test_a_kernel_named_in_the_config_is_never_loaded(tmp_path: Path):
    """A Hub kernel name would make transformers fetch and run code: such keys are dropped."""
    path = save_converted_checkpoint(tmp_path / "c", "bert", "ganet")
    _rewrite(path, lambda c: c["hf"]["config"].update(
        attn_implementation="kernels-community/flash-attn",
        _attn_implementation="kernels-community/flash-attn"))
    with pytest.raises(CheckpointError, match="edited after training"):
        read_checkpoint(path)  # the weights record the description the model was saved with
    # A checkpoint from before that record: the edit passes the digest, the keys are dropped.
    save_file(load_file(str(path / "model.safetensors")), str(path / "model.safetensors"))
    _rewrite(path, lambda c: c.update(weights_sha256=file_sha256(path / "model.safetensors")))
    model = read_checkpoint(path).model.model
    assert "kernels" not in str(model.config._attn_implementation)


def test_replaced_weights_fail_the_hash_and_extra_tensors_are_named(tmp_path: Path):
    path = save_converted_checkpoint(tmp_path / "c", "bert", "qvi")
    weights = load_file(str(path / "model.safetensors"))
    weights["stray"] = torch.zeros(1)
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="SHA-256"):
        read_checkpoint(path)
    _rewrite(path, lambda c: c.update(weights_sha256=file_sha256(path / "model.safetensors")))
    with pytest.raises(CheckpointError, match="'stray' is not part"):
        read_checkpoint(path)


# ----------------------------------------------------------------------------- tokenizer


def test_a_trained_wordpiece_tokenizer_encodes_like_bert_and_round_trips():
    tokenizer = WordPieceTokenizer.train(TEXTS)
    assert tokenizer.tokenize("Alpha, W1!")[0] == "[CLS]"
    assert tokenizer.tokenize("Alpha, W1!") == ["[CLS]", "alpha", ",", "w1", "!", "[SEP]"]
    assert tokenizer.decode(tokenizer.encode("alpha w1")) == ["[CLS]", "alpha", "w1", "[SEP]"]
    assert tokenizer.encode_tokens(tokenizer.tokenize("alpha zzz")) == tokenizer.encode(
        "alpha zzz")
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id) == (0, 1, 2, 3)
    ids, mask = tokenizer.encode_batch(["alpha", "bravo w3 w4"], max_seq=8)
    assert ids.dtype == mask.dtype == np.int64
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert ids[0, 3:].tolist() == [0, 0]
    again = WordPieceTokenizer.from_dict(json.loads(json.dumps(tokenizer.to_dict())))
    assert again == tokenizer and len(again) == len(tokenizer)
    with pytest.raises(DataError, match="more than max_seq=4"):
        tokenizer.encode_batch(["w1 w2 w3 w4"], max_seq=4)
    with pytest.raises(DataError, match="no tokens"):
        tokenizer.encode_batch(["   "], max_seq=4)


def test_a_model_folder_brings_its_own_tokenizer_json_or_vocab_txt(tmp_path: Path):
    trained = WordPieceTokenizer.train(TEXTS)
    folder = tmp_path / "with_json"
    folder.mkdir()
    trained._tokenizer.save(str(folder / "tokenizer.json"))
    assert WordPieceTokenizer.from_directory(folder) == trained
    vocab = tmp_path / "with_vocab"
    vocab.mkdir()
    (vocab / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nalpha\nw\n##1\n")
    from_vocab = WordPieceTokenizer.from_directory(vocab)
    assert from_vocab.tokenize("Alpha w1 zebra") == ["[CLS]", "alpha", "w", "##1", "[UNK]",
                                                     "[SEP]"]
    assert WordPieceTokenizer.from_directory(tmp_path) is None


def test_a_tokenizer_that_is_not_wordpiece_or_pads_with_another_id_is_refused(tmp_path: Path):
    import tokenizers

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    with pytest.raises(DataError, match="not WordPiece"):
        WordPieceTokenizer(bpe)
    (tmp_path / "vocab.txt").write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\nalpha\n")
    with pytest.raises(DataError, match=r"\[PAD\] must be id 0"):
        WordPieceTokenizer.from_directory(tmp_path)
