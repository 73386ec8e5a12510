"""Training reaches a clear held-out accuracy on the built-in tasks, for every variant.

Small models and few steps, so that each test stays within CI time on 2 CPU cores; the tasks are
easy for attention (sparse_evidence: find 1–4 marker words among 16–32 tokens; tagging: mark the
words that occur twice), so any variant that trains correctly passes with a margin.
"""

from __future__ import annotations

from typing import Any

import pytest

from attndeploy.config import GANetConfig, ModelConfig, QVIConfig
from attndeploy.errors import ConfigError
from attndeploy.train import TrainConfig, load_training_data, train

pytestmark = pytest.mark.usefixtures("torch_defaults")

SMALL = {"d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "max_seq": 32}
MIN_ACCURACY = 0.9


@pytest.fixture(scope="module")
def sparse_evidence():
    return load_training_data(task="sparse_evidence", n_train=2000, n_eval=400, max_seq=32)


@pytest.fixture(scope="module")
def tagging():
    return load_training_data(task="tagging", n_train=3000, n_eval=300, max_seq=32)


def _train(data, steps: int, learning_rate: float = 3e-3, **model: Any):
    config = ModelConfig(vocab_size=len(data.tokenizer), num_labels=len(data.label_names),
                         head=data.head, **{**SMALL, **model})
    train_config = TrainConfig(steps=steps, batch_size=32, learning_rate=learning_rate, seed=0)
    return train(config, data.train_set, data.eval_set, train_config, progress=False)


SPARSE_VARIANTS = {
    "standard": {"variant": "standard"},
    "qvi_pooled": {"variant": "qvi", "qvi": QVIConfig(form="pooled")},
    "qvi_pairwise": {"variant": "qvi", "qvi": QVIConfig(form="pairwise")},
    "evolving": {"variant": "evolving"},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SPARSE_VARIANTS)
def test_variant_learns_sparse_evidence(sparse_evidence, name):
    result = _train(sparse_evidence, 150, **SPARSE_VARIANTS[name])
    assert result.metrics["accuracy"] >= MIN_ACCURACY, result.metrics
    assert result.summary["steps_done"] == 150
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert not result.model.training


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, model",
    [
        ("ganet_mlp", {"variant": "ganet", "ganet": GANetConfig(aux="mlp")}),
        ("ganet_bilstm_family", {"variant": "ganet", "family": "bilstm", "lstm_hidden": 32,
                                 "ganet": GANetConfig(aux="bilstm")}),
    ],
    ids=["ganet_mlp", "ganet_bilstm_family"],
)
def test_ganet_learns_sparse_evidence_with_sparse_gates(sparse_evidence, name, model):
    result = _train(sparse_evidence, 150, **model)
    metrics = result.metrics
    assert {"density", "rescues", "rescue_rate"} <= set(metrics)
    assert metrics["accuracy"] >= MIN_ACCURACY, metrics
    assert metrics["density"] < 0.5, metrics
    assert 0 <= metrics["rescue_rate"] <= 1 and metrics["rescues"] == round(
        metrics["rescue_rate"] * metrics["examples"])
    assert "soft_density" in result.history[-1] and "final_soft_density" in result.summary


@pytest.mark.slow
def test_tagging_head_learns_which_words_repeat(tagging):
    result = _train(tagging, 350, learning_rate=5e-3, d_model=64, n_heads=4, d_ff=128)
    assert result.model.config.head == "tagging"
    assert result.metrics["accuracy"] >= MIN_ACCURACY, result.metrics


@pytest.mark.slow
def test_max_seconds_stops_training_early(sparse_evidence):
    config = ModelConfig(vocab_size=len(sparse_evidence.tokenizer), num_labels=4, **SMALL)
    result = train(config, sparse_evidence.train_set, sparse_evidence.eval_set,
                   TrainConfig(steps=10_000, max_seconds=0.5), progress=False)
    assert 1 <= result.summary["steps_done"] < 10_000
    assert "accuracy" in result.metrics


@pytest.mark.parametrize(
    "kwargs, message",
    [({"steps": 0}, "steps must be >= 1"), ({"batch_size": 0}, "batch size"),
     ({"learning_rate": 0.0}, "learning rate"), ({"max_seconds": 0.0}, "max_seconds")],
)
def test_train_config_rejects_unusable_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**kwargs)
