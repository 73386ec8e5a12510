"""The training loop's parts that stand alone: GA-Net's density controller and gate calibration,
best-model tracking."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attndeploy.errors import ConfigError
from attndeploy.training.density import WEIGHT_BOUNDS, DensityController, scheduled_target
from attndeploy.training.selection import BestTracker


def test_the_penalty_weight_rises_while_gates_are_too_dense_and_falls_when_too_sparse():
    controller = DensityController(target=0.3, weight=1e-3, rate=0.05)
    weights = [controller.update(0.6) for _ in range(50)]
    assert all(b > a for a, b in zip(weights, weights[1:], strict=False))
    high = weights[-1]
    for _ in range(50):
        controller.update(0.05)
    assert controller.weight < high


def test_the_penalty_weight_holds_still_at_the_target_and_stays_in_bounds():
    controller = DensityController(target=0.3, weight=0.2)
    for _ in range(20):
        controller.update(0.3)
    assert controller.weight == pytest.approx(0.2)
    low, high = WEIGHT_BOUNDS
    for _ in range(10_000):
        controller.update(1.0)
    assert controller.weight == high
    for _ in range(100_000):
        controller.update(0.0)
    assert controller.weight == low


@pytest.mark.parametrize("kwargs, message", [({"target": 0.0}, "target"),
                                             ({"target": 1.0}, "target"),
                                             ({"target": 0.3, "rate": 0.0}, "rate")])
def test_the_density_controller_refuses_unusable_settings(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DensityController(weight=1e-3, **kwargs)


def test_the_scheduled_target_waits_out_the_warm_up_then_falls_from_all_open_to_the_target():
    def at(epoch: float) -> float | None:
        return scheduled_target(0.3, epoch, warmup=1.0, anneal=2.0)

    assert at(0.0) is None and at(0.99) is None  # no penalty yet
    assert at(1.0) == pytest.approx(1.0)
    assert at(2.0) == pytest.approx(0.65)  # half way down
    assert at(3.0) == pytest.approx(0.3) and at(10.0) == pytest.approx(0.3)
    assert scheduled_target(0.3, 0.0, warmup=0.0, anneal=0.0) == 0.3  # no schedule: the target


def test_a_scheduled_target_overrides_the_configured_one_for_that_step():
    steered, fixed = DensityController(0.3, 0.2), DensityController(0.3, 0.2)
    for _ in range(20):
        steered.update(0.6, target=0.6)  # on the scheduled target: the weight holds
        fixed.update(0.6)  # above the configured target: the weight rises
    assert steered.weight == pytest.approx(0.2) and fixed.weight > 0.2
    assert steered.target == 0.3


def _record(step: int, accuracy: float, loss: float = 1.0, **extra) -> dict:
    return {"step": step, "epoch": step, "accuracy": accuracy, "loss": loss, **extra}


def test_the_best_evaluation_keeps_its_weights_and_patience_counts_the_rest():
    model = nn.Linear(2, 1)
    tracker = BestTracker(patience=2)
    with torch.no_grad():
        model.weight.fill_(1.0)
    assert tracker.offer(_record(1, 0.5), model)
    with torch.no_grad():
        model.weight.fill_(2.0)
    assert tracker.offer(_record(2, 0.7), model)
    with torch.no_grad():
        model.weight.fill_(3.0)
    assert not tracker.offer(_record(3, 0.7, loss=2.0), model)  # a tie on accuracy, worse loss
    assert not tracker.should_stop
    assert not tracker.offer(_record(4, 0.6), model)
    assert tracker.should_stop and tracker.best["step"] == 2
    tracker.restore(model)
    assert torch.equal(model.weight, torch.full((1, 2), 2.0))


def test_with_a_density_target_only_sparse_enough_evaluations_compete():
    model = nn.Linear(2, 1)
    tracker = BestTracker(density_target=0.3, density_slack=0.05)
    tracker.offer(_record(1, 0.9, density=0.8), model)
    tracker.offer(_record(2, 0.8, density=0.5), model)  # not eligible, but nearer the target
    assert tracker.best["step"] == 2
    tracker.offer(_record(3, 0.6, density=0.34), model)  # eligible beats any ineligible one
    tracker.offer(_record(4, 0.95, density=0.6), model)
    assert tracker.best["step"] == 3
    tracker.offer(_record(5, 0.7, density=0.1), model)  # sparser than asked is fine
    assert tracker.best["step"] == 5
    assert BestTracker().should_stop is False  # no patience: never stops


@pytest.fixture(scope="module")
def gated_model_and_data():
    from attndeploy.config import GANetConfig, ModelConfig
    from attndeploy.models import build_model
    from attndeploy.train import load_training_data

    data = load_training_data(task="sparse_evidence", n_train=64, n_eval=200, max_seq=32)
    config = ModelConfig(vocab_size=len(data.tokenizer), num_labels=len(data.label_names),
                         variant="ganet", d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq=32,
                         ganet=GANetConfig(aux_hidden=8))
    torch.manual_seed(0)
    return build_model(config), data.eval_set


@pytest.mark.parametrize("density", [0.2, 0.5, 0.8])
def test_calibration_moves_the_gate_threshold_to_the_density_asked_for(gated_model_and_data,
                                                                       density):
    from attndeploy.train import evaluate
    from attndeploy.training.calibration import calibrate_gate_threshold

    model, dataset = gated_model_and_data
    original = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        result = calibrate_gate_threshold(model, dataset, density)
        measured = evaluate(model, dataset)["density"]  # the exported model's own gates
        assert measured == pytest.approx(result["density_after"])
        assert measured <= density and measured > density - 0.05  # the largest not above it
        bias = model.gates.network.score.bias
        assert bias.item() == pytest.approx(original["gates.network.score.bias"].item()
                                            + result["gate_shift"])
        changed = [k for k in original if not torch.equal(original[k], model.state_dict()[k])]
        assert changed == ["gates.network.score.bias"]  # nothing else moves
    finally:
        model.load_state_dict(original)


def test_the_distillation_loss_is_zero_at_the_teacher_and_t_squared_times_the_kl_elsewhere():
    from attndeploy.training.distill import distillation_loss

    teacher = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])  # [B=2, C=3]
    labels = torch.tensor([0, 2])
    assert float(distillation_loss(teacher.clone(), teacher, labels, 2.0)) == pytest.approx(0.0)
    student = torch.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 0.0]])
    p, q = torch.softmax(teacher / 2.0, -1), torch.softmax(student / 2.0, -1)
    by_hand = 4.0 * float((p * (p.log() - q.log())).sum(-1).mean())  # T² · mean_b KL(p ‖ q)
    assert float(distillation_loss(student, teacher, labels, 2.0)) == pytest.approx(by_hand)


@pytest.mark.parametrize("shape", [(4, 3), (4, 5, 3)])  # classification, tagging
def test_examples_the_teacher_did_not_learn_from_add_nothing_to_the_distillation_loss(shape):
    from attndeploy.training.distill import distillation_loss

    torch.manual_seed(1)
    student, teacher = torch.randn(shape), torch.randn(shape)
    labels = torch.zeros(shape[:-1], dtype=torch.long)  # [B] or [B, T]: every token labelled
    taught = torch.tensor([True, False, True, False])
    each = [float(distillation_loss(student[i : i + 1], teacher[i : i + 1], labels[i : i + 1],
                                    2.0)) for i in range(4)]
    # The taught examples' own losses, averaged over all four: the others count as 0.
    expected = (each[0] + each[2]) / 4
    assert float(distillation_loss(student, teacher, labels, 2.0, taught)) == pytest.approx(
        expected)
    assert float(distillation_loss(student, teacher, labels, 2.0)) == pytest.approx(
        sum(each) / 4)


def test_the_distillation_loss_of_a_tagger_reads_labelled_tokens_only():
    from attndeploy.training.distill import distillation_loss
    from attndeploy.training.evaluation import IGNORE_INDEX

    torch.manual_seed(0)
    student, teacher = torch.randn(2, 4, 3), torch.randn(2, 4, 3)  # [B, T, C]
    labels = torch.tensor([[0, 1, IGNORE_INDEX, IGNORE_INDEX], [2, 0, 1, IGNORE_INDEX]])
    loss = distillation_loss(student, teacher, labels, 1.0)
    moved = student.clone()
    moved[labels == IGNORE_INDEX] += 5.0  # pads: whatever the model says there
    assert float(distillation_loss(moved, teacher, labels, 1.0)) == pytest.approx(float(loss))
    keep = labels != IGNORE_INDEX
    assert float(loss) == pytest.approx(float(distillation_loss(
        student[keep], teacher[keep], labels[keep], 1.0)))  # the mean over the 5 tokens


@pytest.mark.parametrize("task", ["sparse_evidence", "tagging"])
def test_the_teacher_table_holds_each_example_s_logits_as_its_batch_would_get_them(task):
    from attndeploy.data.synthetic import get_task
    from attndeploy.training.distill import batch_targets, teacher_table

    dataset = get_task(task).generate(60, seed=2)[0]
    weights = torch.randn(dataset.input_ids.max() + 1, len(dataset.label_names))

    def teacher(ids, mask):  # a deterministic model: logits from each token, [B, t, C]
        logits = weights[ids] * mask[..., None]
        return {"logits": logits if dataset.head == "tagging" else logits.sum(1)}

    table = teacher_table(teacher, dataset, batch_size=7)
    assert table.shape[0] == len(dataset)
    generator = torch.Generator().manual_seed(0)
    for rows in dataset.batch_rows(8, shuffle=True, generator=generator, bucket=True):
        ids, mask, _ = dataset.batch_at(rows)
        expected = teacher(ids, mask)["logits"]  # [B, C] or [B, t, C]
        assert torch.allclose(batch_targets(table, rows, ids.shape[1]), expected, atol=1e-5)
