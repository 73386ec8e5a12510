"""Training reaches a clear held-out accuracy on the built-in tasks, for every variant.

Small models and few steps, so that each test stays within CI time on 2 CPU cores; the tasks are
easy for attention (sparse_evidence: find 1–4 marker words among 16–32 tokens; tagging: mark the
words that occur twice), so any variant that trains correctly passes with a margin.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch

from attndeploy.config import GANetConfig, ModelConfig, QVIConfig
from attndeploy.errors import ConfigError
from attndeploy.train import TrainConfig, load_training_data, train
from attndeploy.training.config import REAL_TEXT_DEFAULTS, TASK_DEFAULTS

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


# ----------------------------------------------------------------------------- epochs, selection


def _tiny_config(data, **model: Any) -> ModelConfig:
    return ModelConfig(vocab_size=len(data.tokenizer), num_labels=len(data.label_names),
                       head=data.head, **{**SMALL, "d_model": 16, "d_ff": 32, **model})


@pytest.fixture(scope="module")
def small_sparse():
    return load_training_data(task="sparse_evidence", n_train=256, n_eval=128, n_val=96,
                              max_seq=32)


def test_training_counts_epochs_and_evaluates_after_each(small_sparse):
    config = TrainConfig(steps=10_000, max_epochs=3, batch_size=64, warmup_steps=2,
                         keep_best=True)
    result = train(_tiny_config(small_sparse), small_sparse.train_set, small_sparse.eval_set,
                   config, progress=False, val_set=small_sparse.val_set)
    summary = result.summary
    assert summary["steps_per_epoch"] == 4 and summary["steps_done"] == 12
    assert summary["epochs_done"] == 3 and summary["stopped_by"] == "epochs"
    assert [e["epoch"] for e in result.evaluations] == [1, 2, 3]
    assert all(e["examples"] == 96 for e in result.evaluations)  # the validation set
    assert summary["selected_on"] == "validation"
    assert result.metrics["examples"] == 128  # the held-out set
    best = max(result.evaluations, key=lambda e: (e["accuracy"], -e["loss"]))
    assert (result.metrics["best_step"], result.metrics["best_epoch"]) == (best["step"],
                                                                            best["epoch"])


def test_patience_stops_training_and_the_best_weights_come_back(small_sparse):
    config = TrainConfig(steps=10_000, max_epochs=50, batch_size=64, eval_every=1, patience=2,
                         keep_best=True, learning_rate=0.3, warmup_steps=1)  # it diverges
    result = train(_tiny_config(small_sparse), small_sparse.train_set, small_sparse.eval_set,
                   config, progress=False)
    assert result.summary["stopped_by"] == "patience"
    assert result.summary["selected_on"] == "held_out"
    evaluations = result.evaluations
    best = max(range(len(evaluations)),
               key=lambda i: (evaluations[i]["accuracy"], -evaluations[i]["loss"]))
    assert len(evaluations) - 1 - best == 2  # two evaluations without a new best
    assert result.metrics["best_step"] == evaluations[best]["step"] < result.summary["steps_done"]
    # Selected on the held-out set: the restored model scores exactly the best evaluation.
    assert result.metrics["accuracy"] == evaluations[best]["accuracy"]
    assert result.metrics["loss"] == pytest.approx(evaluations[best]["loss"])


def test_by_default_training_ends_with_the_last_step_and_evaluates_once(small_sparse):
    config = TrainConfig(steps=6, batch_size=64)
    result = train(_tiny_config(small_sparse), small_sparse.train_set, small_sparse.eval_set,
                   config, progress=False)
    assert result.metrics["best_step"] == 6 and result.evaluations == []


@pytest.mark.slow
def test_a_density_target_steers_the_ganet_gates():
    """Tagging needs every token as a key, so at the paper's tiny lambda the gates stay about half
    open; with a target the penalty weight moves until the chosen model's gates are that sparse."""
    data = load_training_data(task="tagging", n_train=1000, n_eval=300, max_seq=32)
    model = _tiny_config(data, variant="ganet")
    fixed = TrainConfig(steps=300, keep_best=True)
    free = train(model, data.train_set, data.eval_set, fixed, progress=False)
    steered = train(model, data.train_set, data.eval_set,
                    replace(fixed, density_target=0.25), progress=False)
    assert free.metrics["density"] > 0.4 and "density_target" not in free.metrics
    assert steered.metrics["density"] <= 0.3, steered.metrics
    assert steered.metrics["density_target"] == 0.25
    weights = [h["density_weight"] for h in steered.history]
    assert max(weights) > 1.5 * min(weights)  # it moved with the density
    assert "density_weight" not in free.history[-1]
    assert steered.summary["final_density_weight"] == steered.evaluations[-1]["density_weight"]


def test_the_density_penalty_waits_for_the_warm_up_epochs(small_sparse):
    config = TrainConfig(steps=10_000, max_epochs=3, batch_size=64, warmup_steps=2,
                         density_target=0.3, density_warmup=1.0, density_anneal=1.0,
                         word_dropout=0.3)
    result = train(_tiny_config(small_sparse, variant="ganet"), small_sparse.train_set,
                   small_sparse.eval_set, config, progress=False)
    weights = [h["density_weight"] for h in result.history]  # the weight each step trained with
    assert len(weights) == 12 and weights[:4] == [0.0] * 4  # the first epoch: no penalty
    assert all(w > 0 for w in weights[4:])
    # The controller steers the gates of the words, not of the <unk> put in their place.
    assert all("clean_density" in h for h in result.history)


def test_calibration_leaves_the_kept_model_at_the_asked_validation_density(small_sparse):
    from attndeploy.train import evaluate

    config = TrainConfig(steps=10_000, max_epochs=2, batch_size=64, warmup_steps=2,
                         keep_best=True, density_target=0.3, density_calibrate=0.6)
    result = train(_tiny_config(small_sparse, variant="ganet"), small_sparse.train_set,
                   small_sparse.eval_set, config, progress=False, val_set=small_sparse.val_set)
    calibration = result.summary["gate_calibration"]
    validation = evaluate(result.model, small_sparse.val_set)["density"]
    assert validation == pytest.approx(calibration["density_after"])
    assert 0.55 < validation <= 0.6 and calibration["gate_shift"] != 0.0
    assert calibration["on"] == "validation"
    assert result.metrics["density"] == pytest.approx(0.6, abs=0.1)  # the held-out set


def test_refit_trains_a_fresh_model_on_training_and_validation_for_the_best_epoch_plus_extra(
        small_sparse):
    from attndeploy.train import evaluate

    base = TrainConfig(steps=10_000, max_epochs=4, batch_size=64, warmup_steps=2,
                       keep_best=True, patience=2, refit_extra_epochs=1)
    model_config = _tiny_config(small_sparse)
    data = (small_sparse.train_set, small_sparse.eval_set)
    selected = train(model_config, *data, base, progress=False, val_set=small_sparse.val_set)
    refit = train(model_config, *data, replace(base, refit=True), progress=False,
                  val_set=small_sparse.val_set)
    epochs = math.ceil(selected.metrics["best_epoch"]) + 1
    n = len(small_sparse.train_set) + len(small_sparse.val_set)  # 256 + 96 = 352
    assert refit.summary["refit"]["epochs"] == epochs and refit.summary["refit"]["examples"] == n
    assert refit.summary["refit"]["steps_done"] == epochs * math.ceil(n / 64)
    # Where the best was is the selection run's; the model is the second run's.
    for key in ("best_epoch", "best_step"):
        assert refit.metrics[key] == selected.metrics[key]
    assert refit.summary["stopped_by"] == selected.summary["stopped_by"]
    def timeless(evaluations):  # the same selection run, up to its clock
        return [{k: v for k, v in e.items() if k != "train_seconds"} for e in evaluations]

    assert timeless(refit.evaluations) == timeless(selected.evaluations)
    assert refit.summary["config"]["refit"] is True
    assert refit.metrics == {**evaluate(refit.model, small_sparse.eval_set),
                             "best_epoch": selected.metrics["best_epoch"],
                             "best_step": selected.metrics["best_step"]}
    assert not torch.equal(refit.model.embed.weight, selected.model.embed.weight)


class ConstantTeacher(torch.nn.Module):
    """A teacher sure of one class for every text, whatever the labels say."""

    def __init__(self, num_labels: int, label: int) -> None:
        super().__init__()
        self.logits = torch.full((num_labels,), -4.0)
        self.logits[label] = 4.0

    def forward(self, input_ids, attention_mask):
        return {"logits": self.logits.expand(input_ids.shape[0], -1)}


def test_a_distilled_model_learns_its_teacher_s_answers_over_the_labels(small_sparse):
    from attndeploy.models import build_model
    from attndeploy.train import fit

    config = TrainConfig(steps=10_000, max_epochs=6, batch_size=64, warmup_steps=2,
                         learning_rate=1e-2, distill=1.0)
    model_config = _tiny_config(small_sparse)
    torch.manual_seed(0)
    result = fit(build_model(model_config), small_sparse.train_set, small_sparse.eval_set,
                 config, progress=False, teacher=ConstantTeacher(model_config.num_labels, 1))
    batches = list(small_sparse.eval_set.batches(64, shuffle=False))
    with torch.no_grad():
        predicted = torch.cat([result.model(ids, mask)["logits"].argmax(-1)
                               for ids, mask, _ in batches])  # [N]
    labels = torch.cat([labels for *_, labels in batches])  # [N]
    assert bool(predicted.eq(1).all()) and not bool(labels.eq(1).all())


def test_the_teacher_speaks_only_on_the_examples_it_learnt_from(small_sparse):
    from attndeploy.models import build_model
    from attndeploy.train import fit

    config = TrainConfig(steps=6, batch_size=64, warmup_steps=2, distill=0.5)
    model_config = _tiny_config(small_sparse)
    n = len(small_sparse.train_set)
    taught = torch.arange(n) < n // 2  # [N]: the teacher learnt from the first half

    def weights(teacher_label: int, taught: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)
        result = fit(build_model(model_config), small_sparse.train_set, small_sparse.eval_set,
                     config, progress=False, taught=taught,
                     teacher=ConstantTeacher(model_config.num_labels, teacher_label))
        return result.model.embed.weight

    untaught = torch.zeros(n, dtype=torch.bool)
    # On examples it did not learn from, what the teacher says does not matter ...
    assert torch.equal(weights(0, untaught), weights(1, untaught))
    # ... and on those it did, it does.
    assert not torch.equal(weights(0, taught), weights(1, taught))


def test_ganet_distils_from_its_dense_gate_run_which_trains_first(small_sparse):
    config = TrainConfig(steps=10_000, max_epochs=2, batch_size=64, warmup_steps=2,
                         keep_best=True, density_target=0.3, distill=0.5, refit=True)
    model_config = _tiny_config(small_sparse, variant="ganet")
    data = (small_sparse.train_set, small_sparse.eval_set)
    result = train(model_config, *data, config, progress=False, val_set=small_sparse.val_set)
    alone = train(model_config, *data, replace(config, distill=0.0), progress=False,
                  val_set=small_sparse.val_set)
    teacher = result.summary["teacher"]
    assert (teacher["weight"], teacher["temperature"]) == (0.5, config.distill_temperature)
    assert result.summary["seconds"] > teacher["seconds"] > 0 and "refit" in result.summary
    assert "teacher" not in alone.summary
    # The teacher is the dense-gate run: trained as `alone` with the penalty off, no target and
    # no refit.
    dense = train(replace(model_config, ganet=GANetConfig(density_weight=0.0)), *data,
                  replace(config, distill=0.0, density_target=None, refit=False),
                  progress=False, val_set=small_sparse.val_set)
    assert teacher["accuracy"] == dense.metrics["accuracy"]
    # The same seed and batches: only the teacher's term moved the weights.
    assert not torch.equal(result.model.embed.weight, alone.model.embed.weight)


def test_distillation_is_refused_for_a_model_without_gates(small_sparse):
    with pytest.raises(ConfigError, match="dense-gate teacher applies to gated variants"):
        train(_tiny_config(small_sparse), small_sparse.train_set, small_sparse.eval_set,
              TrainConfig(steps=2, distill=0.5), progress=False)


def test_refit_needs_a_validation_split_and_time_left(small_sparse):
    config = TrainConfig(steps=10_000, max_epochs=2, batch_size=64, keep_best=True, refit=True)
    model_config = _tiny_config(small_sparse)
    alone = train(model_config, small_sparse.train_set, small_sparse.eval_set, config,
                  progress=False)  # selected on the held-out set: nothing to add back
    assert "refit" not in alone.summary
    spent = train(model_config, small_sparse.train_set, small_sparse.eval_set,
                  replace(config, max_seconds=1e-6), progress=False, val_set=small_sparse.val_set)
    assert spent.summary["refit"] == {"skipped": "the time budget was spent on selection"}
    assert spent.summary["stopped_by"] == "time"


def test_word_dropout_replaces_real_tokens_by_unk_only():
    from attndeploy.train import UNK_ID, _drop_words

    ids = torch.arange(2, 42).reshape(4, 10)
    mask = torch.ones_like(ids)
    mask[2:, 6:] = 0
    ids = ids * mask
    dropped = _drop_words(ids, mask, 0.5, torch.Generator().manual_seed(0))
    changed = dropped != ids
    assert (dropped[changed] == UNK_ID).all() and not changed[mask == 0].any()
    assert 0.3 < changed[mask == 1].float().mean() < 0.7
    assert torch.equal(_drop_words(ids, mask, 0.0, torch.Generator()), ids)


def test_length_buckets_keep_every_example_once_and_cut_padding(small_sparse):
    dataset = small_sparse.train_set
    plain = list(dataset.batches(16, shuffle=True, generator=torch.Generator().manual_seed(0)))
    bucketed = list(dataset.batches(16, shuffle=True, generator=torch.Generator().manual_seed(0),
                                    bucket=True))
    assert sorted(int(b[2].shape[0]) for b in bucketed) == sorted(int(b[2].shape[0])
                                                                  for b in plain)
    seen = torch.cat([b[0][:, 0] * 1000 + b[1].sum(1) for b in bucketed]).sort().values
    expected = (dataset.input_ids[:, 0] * 1000 + dataset.attention_mask.sum(1)).sort().values
    assert torch.equal(seen, expected)

    def padding(batches):
        return sum(int((b[1] == 0).sum()) for b in batches)

    assert padding(bucketed) < padding(plain) / 2


def test_the_bag_of_words_baseline_joins_a_built_in_task(small_sparse):
    from attndeploy.train import fit_baseline

    metrics = fit_baseline(small_sparse)
    assert metrics["baseline"] == "naive_bayes_bow"
    assert 0.25 < metrics["baseline_accuracy"] <= 1.0  # markers are words: NB finds them


def test_the_real_text_preset_trains_ganet_without_word_dropout_and_distils_it():
    """GA-Net's noisy gates already drop words in training, and it learns from its dense-gate
    run: only its word dropout and distillation differ."""
    preset, ganet = REAL_TEXT_DEFAULTS.training, REAL_TEXT_DEFAULTS.training_for("ganet")
    changed = {name for name in vars(preset) if getattr(preset, name) != getattr(ganet, name)}
    assert changed == {"word_dropout", "distill"}
    assert ganet.word_dropout == 0.0 < preset.word_dropout
    assert preset.distill == 0.0 < ganet.distill
    for variant in ("standard", "qvi", "evolving"):
        assert REAL_TEXT_DEFAULTS.training_for(variant) == preset
    assert TASK_DEFAULTS.training_for("ganet") == TASK_DEFAULTS.training


@pytest.mark.parametrize(
    "kwargs, message",
    [({"max_epochs": 0}, "max_epochs"), ({"patience": 0}, "patience"),
     ({"eval_every": -1}, "eval_every"), ({"label_smoothing": 1.0}, "label smoothing"),
     ({"word_dropout": -0.1}, "word dropout"), ({"density_target": 1.0}, "density target"),
     ({"density_warmup": -1.0}, "warm-up"), ({"density_slack": -0.1}, "density slack"),
     ({"density_calibrate": 1.0}, "calibrated density"),
     ({"weight_decay": -1.0}, "weight decay"),
     ({"refit_extra_epochs": -1}, "refit_extra_epochs"),
     ({"distill": 1.5}, "distillation weight"), ({"distill": -0.1}, "distillation weight"),
     ({"distill_temperature": 0.0}, "distillation temperature")],
)
def test_train_config_rejects_unusable_training_controls(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**kwargs)
