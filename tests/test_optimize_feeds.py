"""`optimize_feeds`: random feeds from any ONNX model's input signature."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attndeploy.errors import ExportError
from attndeploy.optimize_feeds import dim_bounds, grid_shape, input_specs, random_feed


def embedding_model(*, extra_input: onnx.ValueInfoProto | None = None) -> onnx.ModelProto:
    """ids [batch, seq] int64 -> Gather from a 30-row table; mask [batch, seq]; x [batch, 4]."""
    table = numpy_helper.from_array(np.zeros((30, 4), np.float32), "table")
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
        helper.make_tensor_value_info("step", TensorProto.INT64, [1]),
    ]
    if extra_input is not None:
        inputs.append(extra_input)
    nodes = [helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["table", "ids32"], ["y"])]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [table])
    return helper.make_model(graph)


def test_ids_are_bounded_by_the_table_they_index_and_masks_are_ones():
    specs = input_specs(embedding_model())
    assert {s.name: s.high for s in specs} == {"ids": 30, "attention_mask": None, "x": None,
                                               "step": None}
    feed = random_feed(specs, (8, 32), {})
    assert feed["ids"].shape == (8, 32) and feed["ids"].dtype == np.int64
    assert 0 <= feed["ids"].min() and feed["ids"].max() < 30 and len(np.unique(feed["ids"])) > 5
    assert (feed["attention_mask"] == 1).all()
    assert feed["x"].shape == (8, 4) and feed["x"].dtype == np.float32 and feed["x"].std() > 0.5
    assert feed["step"].tolist() == [0]  # an integer input indexing nothing: zeros


def test_dims_are_clipped_into_the_bounds_the_metadata_records():
    specs = input_specs(embedding_model())
    bounds = dim_bounds({"attndeploy.dim_bounds": json.dumps({"seq": [2, 20]})})
    assert bounds == {"seq": (2, 20)}
    assert random_feed(specs, (1, 128), bounds)["ids"].shape == (1, 20)
    assert random_feed(specs, (1, 1), bounds)["ids"].shape == (1, 2)
    assert grid_shape(specs, (32, 128), bounds) == (32, 20)
    assert dim_bounds({"attndeploy.dim_bounds": "[not json"}) == {}


def test_a_string_input_is_refused_by_name():
    text = helper.make_tensor_value_info("text", TensorProto.STRING, ["batch"])
    with pytest.raises(ExportError, match="input text is a string tensor"):
        input_specs(embedding_model(extra_input=text))
