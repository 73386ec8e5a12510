"""A Hugging Face config.json is checked before any model is built (`integrations/hf_config.py`):
`attndeploy train --hf-model` on a folder whose config asks for what cannot be built (sizes out
of attndeploy's own bounds, zero heads, an unknown activation, ...) ends at once with one line
naming the file and the key, exit 1, nothing written; a converted checkpoint's `hf` config is
held to the same checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attndeploy.cli import app as cli_app  # noqa: E402
from attndeploy.configbase import SIZE_LIMITS  # noqa: E402
from attndeploy.integrations.hf_config import HF_LIMITS, HF_SIZES  # noqa: E402

TINY = {"bert": {"model_type": "bert", "hidden_size": 16, "num_hidden_layers": 1,
                 "num_attention_heads": 2, "intermediate_size": 32,
                 "max_position_embeddings": 64, "vocab_size": 100},
        "distilbert": {"model_type": "distilbert", "dim": 16, "n_layers": 1, "n_heads": 2,
                       "hidden_dim": 32, "max_position_embeddings": 64, "vocab_size": 100}}

# (model type, changes to its tiny config, a piece of the one-line error)
BAD_CONFIGS = {
    "width huge": ("bert", {"hidden_size": 10**9},
                   "hidden_size is 1,000,000,000, above the limit of 65,536"),
    "width negative": ("bert", {"hidden_size": -384}, "hidden_size must be at least 1, got -384"),
    "width a string": ("bert", {"hidden_size": "16"},
                       "hidden_size must be an integer, got '16'"),
    "width a bool": ("bert", {"hidden_size": True}, "hidden_size must be an integer, got True"),
    "width a float": ("bert", {"hidden_size": 16.0}, "hidden_size must be an integer, got 16.0"),
    "no heads": ("bert", {"num_attention_heads": 0},
                 "num_attention_heads must be at least 1, got 0"),
    "a million layers": ("bert", {"num_hidden_layers": 10**6},
                         "num_hidden_layers is 1,000,000, above the limit of 1,024"),
    "no layers": ("bert", {"num_hidden_layers": 0}, "num_hidden_layers must be at least 1"),
    "huge position table": ("bert", {"max_position_embeddings": 10**9},
                            "max_position_embeddings is 1,000,000,000, above the limit"),
    "no feed-forward": ("bert", {"intermediate_size": 0}, "intermediate_size must be at least 1"),
    "no segments": ("bert", {"type_vocab_size": 0}, "type_vocab_size must be at least 1"),
    "empty vocabulary": ("bert", {"vocab_size": 0}, "vocab_size must be at least 1"),
    "a billion labels": ("bert", {"num_labels": 10**9}, "num_labels is 1,000,000,000, above"),
    "width not divisible": ("bert", {"hidden_size": 15},
                            "hidden_size (15) must be divisible by num_attention_heads (2)"),
    "unknown activation": ("bert", {"hidden_act": "nope"},
                           "hidden_act 'nope' is not an activation transformers has"),
    "dropout above one": ("bert", {"hidden_dropout_prob": 2.0},
                          "hidden_dropout_prob must lie in [0, 1], got 2.0"),
    "pad id outside the vocabulary": ("bert", {"pad_token_id": 500},
                                      "pad_token_id 500 is not an id of the vocabulary of 100"),
    "a field transformers types": ("bert", {"layer_norm_eps": "tiny"}, "layer_norm_eps"),
    "too many parameters together": ("bert", {"hidden_size": 65_536, "num_attention_heads": 64,
                                              "num_hidden_layers": 1_024},
                                     "parameters, above the limit of 4,000,000,000"),
    "distilbert width huge": ("distilbert", {"dim": 10**9}, "dim is 1,000,000,000, above"),
    "distilbert no heads": ("distilbert", {"n_heads": 0}, "n_heads must be at least 1, got 0"),
    "distilbert not divisible": ("distilbert", {"dim": 15},
                                 "dim (15) must be divisible by n_heads (2)"),
    "distilbert unknown activation": ("distilbert", {"activation": "nope"},
                                      "activation 'nope' is not an activation"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_a_config_that_cannot_be_built_is_one_line_before_any_model(name, tmp_path: Path,
                                                                    monkeypatch, capsys):
    model_type, changes, fragment = BAD_CONFIGS[name]
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY[model_type], **changes}))

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built from a config that fails its checks")

    monkeypatch.setattr("attndeploy.integrations.hf_train.build_classifier", no_model)
    monkeypatch.setattr("sys.argv", [
        "attndeploy", "train", "--hf-model", str(folder), "--dataset", "sparse_evidence",
        "--n-train", "8", "--n-eval", "4", "--steps", "1", "--max-seq", "32",
        "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1, err
    assert len(err) == 1, err
    assert err[0].startswith(f"error (config): {folder / 'config.json'}: "), err[0]
    assert fragment in err[0], err[0]
    assert not (tmp_path / "out").exists()


def test_the_limits_are_attndeploys_own():
    """One table: each transformers size is bounded as the attndeploy size it is."""
    for name, own in HF_SIZES.items():
        assert HF_LIMITS[name] == SIZE_LIMITS[own]


@pytest.mark.parametrize(("changes", "match"), [
    ({"num_attention_heads": 0}, "hf config num_attention_heads must be at least 1, got 0"),
    ({"hidden_size": "16"}, "hf config hidden_size must be an integer"),
    ({"hidden_act": "nope"}, "hf config hidden_act 'nope' is not an activation"),
    ({"layer_norm_eps": "tiny"}, "hf config .*layer_norm_eps"),
])
def test_a_checkpoints_hf_config_is_held_to_the_same_checks(tmp_path: Path, changes, match):
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.errors import CheckpointError

    from .hf_models import save_converted_checkpoint

    path = save_converted_checkpoint(tmp_path / "c", "bert", "evolving")
    config = json.loads((path / "config.json").read_text())
    config["hf"]["config"].update(changes)
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=match) as info:
        read_checkpoint(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_a_model_folders_json_nested_deep_is_one_line(name, tmp_path: Path):
    """Read through the one JSON reader (`attndeploy.jsonread`): a RecursionError in Python's
    parser, or nesting past the limit, is a DataError naming the file."""
    from attndeploy.errors import DataError
    from attndeploy.integrations.hf_data import load_source

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY["bert"]))
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\n")
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match=rf"^{folder / name} nests JSON more than 64 levels"):
        load_source(folder)
