"""Training a decoder (attndeploy.models.decoder.fit): the held-out split, the windows, and
GA-Net's density target, which closes gates so fewer tokens enter the cache."""

from __future__ import annotations

import pytest

from attndeploy.errors import DataError
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.models.decoder.fit import FitOptions, fit_decoder, split_texts, windows

TEXTS = ["the cat sees the ball .", "a dog likes the tree .", "the bird finds a ball ."] * 10
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "max_seq": 16}


def test_the_held_out_split_keeps_at_least_one_text_on_each_side():
    train, held = split_texts(["a", "b"], 0.9, seed=0)
    assert len(train) == len(held) == 1
    with pytest.raises(DataError, match="at least 2 texts"):
        split_texts(["a"], 0.2, seed=0)


def test_a_long_text_is_cut_into_windows_that_predict_every_token_once():
    tokenizer = LMTokenizer.build(["a b c d e f g"])
    ids = tokenizer.encode("a b c d e f g", bos=True, eos=True)  # 9 ids, 8 predictions
    rows = windows(tokenizer, ["a b c d e f g"], max_seq=3)
    assert sum(len(r) - 1 for r in rows) == len(ids) - 1
    assert all(len(r) <= 4 for r in rows)


@pytest.mark.slow  # two trainings of 80 steps: about 40 s
def test_a_density_target_closes_ganet_s_gates_and_so_shrinks_its_cache():
    options = {"steps": 80, "batch_size": 8, "learning_rate": 1e-2, "warmup_steps": 5}
    free = fit_decoder(TEXTS, {"variant": "ganet", **TINY}, FitOptions(**options))
    held = fit_decoder(TEXTS, {"variant": "ganet", **TINY},
                       FitOptions(**options, density_target=0.2, density_weight=5.0))
    assert free.metrics["gate_density"] > 0.9
    assert held.metrics["gate_density"] < free.metrics["gate_density"] - 0.5
