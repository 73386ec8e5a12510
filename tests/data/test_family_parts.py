"""A model family's training part decides what its data are: the keys of a JSONL line, the
labels' dtype and shape, how a batch trims them and two sets join them, the metrics, the
baseline. The built-in families follow the protocol (`attndeploy.training.families`), and a
family that lives outside the package (text regression, `tests/families/sixth_family/`) goes
through the same data, evaluation and selection code with nothing else changed."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from attndeploy.data import load_jsonl
from attndeploy.data.jsonl import family_of_record, read_jsonl_family
from attndeploy.errors import DataError
from attndeploy.families.registry import FamilySpec, family_specs
from attndeploy.training.families import JSONL_READER, REQUIRED, training_part
from tests.families.sixth_family import load_part

REGRESSION = load_part("training").__name__


@pytest.mark.parametrize("spec", family_specs(), ids=lambda spec: spec.name)
def test_every_family_s_training_part_defines_the_protocol(spec):
    part = training_part(spec)
    missing = [name for name in REQUIRED if not hasattr(part, name)]
    if part.JSONL_KEYS:
        missing += [name for name in JSONL_READER if not hasattr(part, name)]
    assert missing == []
    assert isinstance(part.PRIMARY_METRIC, str) and isinstance(part.GREATER_IS_BETTER, bool)


@pytest.fixture
def regression(monkeypatch):
    """text-regression registered for one test (its spec as its own `__init__` would hold it)."""
    from attndeploy.families import registry

    family_specs()  # the built-in ones first
    spec = FamilySpec(name="text-regression", head="regression", order=5,
                      summary="a text in, a number out", outputs=lambda n: (),
                      min_labels=1, training=REGRESSION, package="sixth_family")
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)  # as register_family; undone after
    return spec


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


ROWS = [{"text": "good film", "value": 2.0}, {"text": "bad plot", "value": -1.5},
        {"text": "a good good scene", "value": 3.0}, {"text": "fine", "value": 0.25}]


def test_a_file_s_first_line_chooses_the_family_that_reads_it(tmp_path, regression):
    assert family_of_record({"text": "x", "label": "a"})[0].name == "text-classification"
    assert family_of_record({"text": "x", "value": 1.0})[0].name == "text-regression"
    # no family's keys: the first family that reads JSONL, whose reader names what is missing
    assert family_of_record({"words": []})[0].name == "text-classification"
    head, (texts, values) = read_jsonl_family(_write(tmp_path / "r.jsonl", ROWS))
    assert head == "regression" and texts[0] == "good film" and values == [2.0, -1.5, 3.0, 0.25]


def test_a_regression_file_becomes_float_labels_with_its_family_s_checks(tmp_path, regression):
    dataset, _ = load_jsonl(_write(tmp_path / "r.jsonl", ROWS))
    assert dataset.head == "regression" and dataset.label_names == ("value",)
    assert dataset.labels.dtype == torch.float32 and dataset.labels.shape == (4,)
    joined = dataset.concat(dataset.subset(torch.tensor([2])))  # [5]
    assert joined.labels.tolist() == [2.0, -1.5, 3.0, 0.25, 3.0]
    _, _, labels = next(joined.batches(8, shuffle=False))
    assert labels.dtype == torch.float32 and labels.shape == (5,)
    bad = _write(tmp_path / "bad.jsonl", [*ROWS, {"text": "x", "value": "high"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:5: 'value' must be a finite number"):
        load_jsonl(bad)
    with pytest.raises(DataError, match="missing 'value'"):
        load_jsonl(_write(tmp_path / "m.jsonl", [{"text": "x"}]), family=regression)
    with pytest.raises(DataError, match="r.jsonl:1: missing 'tokens'"):  # a tagger's lines
        load_jsonl(tmp_path / "r.jsonl", family="token-classification")


class _Predicts(nn.Module):
    """A model whose prediction is the mean token id: logits [B, 1]."""

    is_gated = False

    def forward(self, input_ids, attention_mask, details=False):
        mask = attention_mask.float()
        return {"logits": ((input_ids * mask).sum(-1) / mask.sum(-1))[:, None]}


def test_evaluation_and_selection_read_the_family_s_metrics(tmp_path, regression):
    from attndeploy.training.evaluation import evaluate
    from attndeploy.training.selection import BestTracker

    dataset, _ = load_jsonl(_write(tmp_path / "r.jsonl", ROWS))
    metrics = evaluate(_Predicts(), dataset, batch_size=3)
    mask = dataset.attention_mask.float()
    predicted = (dataset.input_ids * mask).sum(-1) / mask.sum(-1)  # [N]
    rmse = math.sqrt(float(((predicted - dataset.labels) ** 2).mean()))
    assert list(metrics) == ["rmse", "pearson", "loss", "examples"]
    assert metrics["rmse"] == pytest.approx(rmse) and metrics["loss"] == pytest.approx(rmse ** 2)
    part = training_part(regression)
    tracker = BestTracker(primary=part.PRIMARY_METRIC, greater_is_better=part.GREATER_IS_BETTER)
    model = nn.Linear(1, 1)
    tracker.offer({"step": 1, "epoch": 1, "rmse": 0.9, "loss": 0.81}, model)
    assert tracker.offer({"step": 2, "epoch": 2, "rmse": 0.5, "loss": 0.25}, model)  # lower wins
    assert not tracker.offer({"step": 3, "epoch": 3, "rmse": 0.7, "loss": 0.49}, model)


def test_the_baseline_and_its_comparison_are_the_family_s(tmp_path, regression):
    from attndeploy.training.baseline import compare_with_baseline
    from attndeploy.training.data import fit_baseline, load_training_data

    rows = [{"text": f"w{i % 7} w{i % 3}", "value": float(i % 5)} for i in range(40)]
    data = load_training_data(task=None, data_file=_write(tmp_path / "r.jsonl", rows), seed=0)
    assert data.head == "regression" and data.label_names == ("value",)
    baseline = fit_baseline(data)
    mean = float(data.train_set.labels.double().mean())
    expected = math.sqrt(float(((data.eval_set.labels.double() - mean) ** 2).mean()))
    assert baseline["baseline"] == "mean"
    assert baseline["baseline_rmse"] == pytest.approx(expected)
    compared = compare_with_baseline({"rmse": expected / 2, **baseline}, primary="rmse",
                                     greater_is_better=False)
    assert compared == {"baseline_margin": pytest.approx(expected / 2), "beats_baseline": True}
