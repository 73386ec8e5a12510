"""Every `attndeploy.nn` layer inside a model the tests define, exported with `export_model` and
compared with PyTorch eval mode in onnxruntime over a padded shape grid (docs/ops.md,
docs/variants.md C1, C3, C7, G2, G3, E8). GA-Net gates must agree exactly; evolving logits layer by
layer.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from attndeploy.export import export_model
from attndeploy.validate.grid import Shape, make_inputs
from tests.cases import FP32_TOLERANCE
from tests.nn.toy_models import DYNAMIC, TOYS, VOCAB, example_inputs

pytestmark = pytest.mark.usefixtures("torch_defaults")

# seq 1, odd sizes, one-token rows, mixed padding; none is the export example's 2x6
GRID = [Shape(1, 1), Shape(3, 1), Shape(1, 9), Shape(2, 5), Shape(4, 7), Shape(3, 12)]
EXTRA_PADDING = 3


def assert_output_close(name: str, got: np.ndarray, want: np.ndarray, mask: np.ndarray) -> None:
    """Per-token outputs at real tokens only (pads carry no meaning); gates exactly."""
    assert got.shape == want.shape, (name, got.shape, want.shape)
    per_token = got.ndim >= 2 and got.shape[:2] == mask.shape
    if per_token:
        got, want = got[mask], want[mask]
    if got.dtype == np.bool_:
        assert np.array_equal(got, want), f"{name}: {int((got != want).sum())} gate flips"
        return
    assert np.isfinite(got).all(), f"{name}: non-finite values"
    atol, rtol = FP32_TOLERANCE
    diff = np.abs(got.astype(np.float64) - want)
    bad = (diff > atol) & (diff > rtol * np.abs(want))
    assert not bad.any(), f"{name}: {int(bad.sum())} elements differ, max {diff.max():.3g}"


@pytest.mark.parametrize("name", sorted(TOYS))
def test_each_layer_call_is_one_attndeploy_node_with_its_function(exported, name):
    toy = exported(name)
    model = onnx.load(str(toy.path))
    nodes = Counter(n.op_type for n in model.graph.node if n.domain == "attndeploy")
    assert nodes == Counter(toy.expected_nodes) == Counter(toy.result.custom_nodes)
    assert {f.name for f in model.functions} == set(toy.expected_nodes)
    assert toy.result.output_names == toy.expected_outputs
    for value in [*model.graph.input]:
        dims = [d.dim_param for d in value.type.tensor_type.shape.dim]
        assert dims == ["batch", "seq"], value.name
    lstms = sum(n.op_type == "LSTM" for n in model.graph.node)
    assert lstms == (2 if name == "ganet_bilstm" else 0)  # one per direction run


@pytest.mark.parametrize("name", sorted(TOYS))
def test_onnxruntime_matches_pytorch_over_a_padded_grid(exported, name):
    toy = exported(name)
    for shape in GRID:
        feed = make_inputs(shape, VOCAB, seed=3)
        mask = feed["attention_mask"] != 0
        got, want = toy.run(feed), toy.reference(feed)
        for output in toy.result.output_names:
            assert_output_close(f"{output} at {shape}", got[output], want[output], mask)


def _cut(value: np.ndarray, padded: int, seq: int) -> np.ndarray:
    """Undo right padding: every axis after the batch axis of length `padded` cut to `seq`."""
    index = tuple(slice(0, seq) if axis and size == padded else slice(None)
                  for axis, size in enumerate(value.shape))
    return value[index]


@pytest.mark.parametrize("name", sorted(TOYS))
def test_more_padding_leaves_real_tokens_unchanged_in_onnxruntime(exported, name):
    toy = exported(name)
    for shape in (Shape(2, 5), Shape(4, 7)):
        feed = make_inputs(shape, VOCAB, seed=4)
        mask = feed["attention_mask"] != 0
        padded = {k: np.pad(v, ((0, 0), (0, EXTRA_PADDING))) for k, v in feed.items()}
        plain, more = toy.run(feed), toy.run(padded)
        for output in toy.result.output_names:
            cut = _cut(more[output], shape.seq + EXTRA_PADDING, shape.seq)
            assert_output_close(f"{output} at {shape}+pad", cut, plain[output], mask)


def test_gates_agree_exactly_also_when_every_gate_logit_is_negative(exported):
    """All closed: the rescue opens the largest real logit in both runtimes (G3, G4)."""
    toy = exported("ganet_mlp")
    feed = make_inputs(Shape(4, 7), VOCAB, seed=5)
    with torch.no_grad():
        toy.model.gate.score.bias.fill_(-30.0)
    try:
        path = toy.path.with_name("ganet_closed.onnx")
        export_model(toy.model, path, inputs=example_inputs(), dynamic_shapes=DYNAMIC)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = dict(zip(toy.result.output_names, session.run(None, feed), strict=True))
        want = toy.reference(feed)
    finally:
        with torch.no_grad():
            toy.model.gate.score.bias.fill_(0.0)
    mask = feed["attention_mask"] != 0
    assert (want["gate_logits"][mask] < -10).all()
    assert (want["gates"].sum(-1) == 1).all()  # exactly one rescued gate per example
    for output in toy.result.output_names:
        assert_output_close(output, got[output], want[output], mask)
