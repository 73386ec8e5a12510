"""Generic validation: `validate_module(model, onnx_path, grid=... | feeds=...)` on models the
tests define, with the statistics, oracles and report of a checkpoint's validation."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch

from attndeploy.errors import ValidationError
from attndeploy.validate import ORACLES, ValidationOptions, validate_model, validate_module
from tests.nn.toy_models import TOYS, VOCAB, example_inputs

pytestmark = pytest.mark.usefixtures("torch_defaults")

GRID = "1x1,3x1,2x5,4x7"
FAST = ValidationOptions(reference_shapes="1x1,2x5")


@pytest.mark.parametrize("name", sorted(TOYS))
def test_every_toy_model_passes_over_a_grid_with_every_oracle(exported, name):
    toy = exported(name)
    report = validate_module(toy.model, toy.path, FAST, grid=GRID, vocab_size=VOCAB)
    assert report.passed, report.failures()
    assert set(report.oracles) == set(ORACLES)
    assert [str(s) for s, _ in report.shapes] == GRID.split(",")
    assert report.padding and all(case.passed for case in report.padding)
    data = json.loads(report.to_json_text())
    assert data["model"]["outputs"] == list(toy.result.output_names)
    assert data["model"]["mask_input"] == "attention_mask"
    if name.startswith("ganet"):
        gates = data["gates"]
        assert gates["flips"] == 0 and gates["compared"] > 0 and gates["margin"] > 0
    else:
        assert data["gates"] is None
    assert "# Parity validation: PASSED" in report.to_markdown()


def test_user_feeds_are_validated_one_by_one_even_with_equal_shapes(exported):
    toy = exported("evolving_chain")
    feeds = [example_inputs(2, 6, seed=s) for s in range(3)] + [example_inputs(1, 3, seed=9)]
    report = validate_module(toy.model, toy.path, ValidationOptions(oracles=("onnxruntime[all]",)),
                            feeds=feeds)
    assert report.passed, report.failures()
    results = report.oracles["onnxruntime[all]"].results
    assert [str(r.shape) for r in results] == ["feed0:2x6", "feed1:2x6", "feed2:2x6", "feed3:1x3"]
    assert [list(lengths) for _, lengths in report.shapes][0] == [6, 3]


def test_a_changed_weight_fails_with_statistics_and_the_model_is_left_as_it_was(exported, tmp_path):
    toy = exported("qvi_pooled")
    model = onnx.load(str(toy.path))
    for tensor in model.graph.initializer:
        if tensor.name.endswith("classify.weight"):
            values = onnx.numpy_helper.to_array(tensor) + 1e-2
            tensor.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), tensor.name))
    changed = tmp_path / "changed.onnx"
    onnx.save(model, str(changed))
    toy.model.train()
    report = validate_module(toy.model, changed, FAST, grid=GRID, vocab_size=VOCAB)
    assert toy.model.training  # the validation ran it in eval mode and restored the flag
    toy.model.eval()
    assert not report.passed
    failure = report.failures()[0]
    assert failure["check"] == "parity" and failure["output"] == "output"
    stats = report.oracles["onnxruntime[all]"].results[0].result.outputs["output"]
    assert stats.max_abs > 1e-3 and stats.min_atol == pytest.approx(stats.max_abs, rel=0.5)


def test_refusals_before_anything_runs(exported, tmp_path):
    toy = exported("qvi_pooled")
    with pytest.raises(ValidationError, match="exactly one of feeds"):
        validate_module(toy.model, toy.path)
    with pytest.raises(ValidationError, match="vocab_size"):
        validate_module(toy.model, toy.path, grid="2x3")
    with pytest.raises(ValidationError, match="the graph takes"):
        validate_module(toy.model, toy.path, feeds=[{"input_ids": torch.ones(1, 2).long()}])
    with pytest.raises(ValidationError, match="does not exist"):
        validate_module(toy.model, tmp_path / "missing.onnx", grid="2x3", vocab_size=VOCAB)
    with pytest.raises(ValidationError, match="validate an nn.Module"):
        validate_model(str(tmp_path), toy.path, grid="2x3")


def test_validate_model_given_a_module_still_validates_it_with_a_deprecation(exported):
    """The old entry point for a module keeps working for one release, and says where to go."""
    toy = exported(sorted(TOYS)[0])
    with pytest.warns(DeprecationWarning, match="validate_module"):
        report = validate_model(toy.model, toy.path, FAST, grid=GRID, vocab_size=VOCAB)
    assert report.passed
