"""`inspect_model` (`attndeploy inspect MODEL.onnx [--json]`): what an ONNX file holds, as data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from attndeploy.errors import ExportError
from attndeploy.export import format_inspection, inspect_model
from tests.export.conftest import Exports


def _plain_model(path: Path, *, custom_node: bool = False) -> Path:
    """A hand-built model: Relu, or a custom-domain node without a function body."""
    node = (helper.make_node("Mystery", ["x"], ["y"], domain="acme") if custom_node
            else helper.make_node("Relu", ["x"], ["y"]))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("acme", 2)]
                                              if custom_node else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="someone")
    onnx.save(model, str(path))
    return path


def test_an_attndeploy_export_is_described_in_full(exports: Exports):
    exported = exports.get("ganet_mlp")
    info = inspect_model(exported.path)
    json.dumps(info)  # JSON-ready as it is
    assert info["made_by_attndeploy"] is True
    assert info["file_size"] == exported.path.stat().st_size
    assert info["opset"] == 18 and info["opsets"] == {"ai.onnx": 18, "attndeploy": 1}
    assert info["custom_domains"] == ["attndeploy"]
    assert info["custom_nodes"] == {"attndeploy::GatedAttention": exported.config.n_layers,
                                    "attndeploy::GatedAttentionPooling": 1}
    assert all(op["has_function"] for op in info["custom_ops"])
    assert info["all_custom_ops_have_functions"] is True
    assert [(v["name"], v["dtype"], v["dims"]) for v in info["inputs"]] == [
        ("input_ids", "int64", ["batch", "seq"]),
        ("attention_mask", "int64", ["batch", "seq"]),
    ]
    assert [(v["name"], v["dtype"], v["dims"]) for v in info["outputs"]] == [
        ("logits", "float32", ["batch", 3]),
        ("gates", "bool", ["batch", "seq"]),
    ]
    assert info["metadata"]["variant"] == "ganet"
    assert info["metadata"]["weights_sha256"] == exported.result.metadata[
        "attndeploy.weights_sha256"]
    assert info["config"] == exported.config.to_dict()
    assert info["parameters"] > 0 and info["external_data"] is False
    text = format_inspection(info)
    assert f"{exported.config.n_layers} x attndeploy::GatedAttention  [function]" in text
    assert "1 x attndeploy::GatedAttentionPooling  [function]" in text
    assert "gates: bool [batch, seq]" in text


def test_a_tagger_shows_logits_over_batch_seq_and_labels(exports: Exports):
    info = inspect_model(exports.get("ganet_tagging").path)
    (logits,) = [v for v in info["outputs"] if v["name"] == "logits"]
    assert logits["dims"] == ["batch", "seq", 3]
    assert "attndeploy::GatedAttentionPooling" not in info["custom_nodes"]


def test_a_foreign_model_is_not_attndeploys(tmp_path: Path):
    info = inspect_model(_plain_model(tmp_path / "plain.onnx"))
    assert info["made_by_attndeploy"] is False
    assert info["metadata"] == {} and info["config"] is None
    assert info["custom_ops"] == [] and info["all_custom_ops_have_functions"] is True
    assert info["inputs"] == [{"name": "x", "dtype": "float32", "dims": ["n", 3]}]
    assert info["outputs"] == [{"name": "y", "dtype": "float32", "dims": None}]
    assert "custom nodes: none" in format_inspection(info)


def test_a_custom_node_without_a_function_is_flagged(tmp_path: Path):
    info = inspect_model(_plain_model(tmp_path / "custom.onnx", custom_node=True))
    assert info["custom_ops"] == [
        {"domain": "acme", "op_type": "Mystery", "count": 1, "has_function": False}
    ]
    assert info["all_custom_ops_have_functions"] is False
    assert info["opsets"] == {"ai.onnx": 18, "acme": 2}
    assert "NO FUNCTION" in format_inspection(info)


@pytest.mark.parametrize("content", [b"", b"hello, I am a text file\n", bytes(range(256)) * 4])
def test_a_file_that_is_not_onnx_is_an_export_error(tmp_path: Path, content: bytes):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(ExportError, match="is not an ONNX model"):
        inspect_model(path)


def test_a_missing_file_is_an_export_error(tmp_path: Path):
    with pytest.raises(ExportError, match="does not exist"):
        inspect_model(tmp_path / "absent.onnx")
    with pytest.raises(ExportError, match="not a file"):
        inspect_model(tmp_path)


def test_inspecting_does_not_import_torch():
    code = ("import sys; from attndeploy.export import inspect_model; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_config_nested_deep_is_shown_as_none(tmp_path: Path):
    path = _plain_model(tmp_path / "deep.onnx")
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {"attndeploy.config": "[" * 100_000 + "]" * 100_000})
    onnx.save(model, str(path))
    info = inspect_model(path)
    assert info["config"] is None and "config" in info["metadata"]
