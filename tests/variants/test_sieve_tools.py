"""A gated plug-in variant (`tests/variants/fifth_variant/sieve`, in no list of names) under
`attndeploy quantize` and `attndeploy debug compare`, through the CLI in a copy of the package
with the variant's folder added (as `test_fifth_variant.py` does).

- quantize finds the sieve's gate network from its spec (`VariantSpec.gating`), keeps it in fp32,
  and reports label agreement, accuracy and hard-gate flips on labelled texts: with the scorer in
  fp32 the gates (a function of the token embeddings only) cannot flip.
- debug compare pairs each `SieveAttention` node with the op call of the PyTorch layer (which
  holds its own binding of the op's reference) and compares the gates exactly; against the int8
  model it names the sieve node where the difference is."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.variants.test_fifth_variant import _tree_with
from tests.variants.test_gated_plugin_served import EXPORT

pytestmark = pytest.mark.slow

NAME = "sieve"
VOCAB = [f"w{i}" for i in range(2, 24)]  # the words of EXPORT's vocabulary


def _texts() -> list[dict[str, str]]:
    """Labelled texts of the vocabulary's words (both labels, so the file is a valid one)."""
    return [{"text": " ".join(VOCAB[(i + k * 5) % len(VOCAB)] for k in range(3 + i % 6)),
             "label": "ab"[i % 2]} for i in range(40)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Callable[..., Any]]:
    """The copied tree with the sieve's checkpoint (`ckpt`), its export (`sieve.onnx`) and
    labelled texts (`texts.jsonl`), and `cli(*args) -> (exit code, stdout JSON)` in it."""
    root = tmp_path_factory.mktemp("sieve-tools")
    env = _tree_with(root, NAME)
    done = subprocess.run([sys.executable, "-c", EXPORT, str(root)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "texts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in _texts()))

    def cli(*args: str) -> tuple[int, Any]:
        run = subprocess.run([sys.executable, "-m", "attndeploy", *args], cwd=root, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.stdout.strip(), f"{args[:2]}: {run.stderr[-3000:]}"
        return run.returncode, json.loads(run.stdout)

    return root, cli


def test_quantize_keeps_the_sieve_gate_network_in_fp32_and_reports_its_checks(tree):
    root, cli = tree
    # an untrained model's logits lie close together: a text of 40 may change its label
    code, report = cli("quantize", "sieve.onnx", "--out", "int8.onnx", "--data", "texts.jsonl",
                       "--min-agreement", "0.9", "--max-accuracy-drop", "0.1", "--json")
    assert code == 0 and report["written"], report
    (candidate,) = report["candidates"]
    # the scorer's two Linear layers, found from the plug-in's spec, stay fp32
    assert len(candidate["gate_network"]) == 2
    assert set(candidate["gate_network"]) <= set(candidate["excluded"])
    grid, data = candidate["grid"], candidate["data"]
    assert grid["agreement"] == "label agreement" and 0.0 <= grid["label_agreement"] <= 1.0
    assert grid["gate_flips"] == 0
    assert data["texts"] == 40 and data["agreement"] == "label agreement"
    assert data["label_agreement"] >= 0.9 and data["score"] == "accuracy"
    assert data["fp32_accuracy"] is not None and data["accuracy_drop"] <= 0.1
    assert data["gate_flips"] == 0 and data["gates"] > 40  # every real token's gate compared

    from attndeploy.runtime.model import InferenceModel

    int8 = InferenceModel(root / "int8.onnx")
    assert int8.gated and int8.variant == NAME  # the fp32 model's metadata, kept


def _layers(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [layer for layer in report["layers"] if layer["kind"] == kind]


def test_debug_compare_pairs_the_sieve_node_with_the_pytorch_layer(tree):
    _, cli = tree
    code, report = cli("debug", "compare", "ckpt", "sieve.onnx", "--shapes", "4x16", "--json")
    assert code == 0, report
    nodes = _layers(report, "node")
    assert [node["op_type"] for node in nodes] == ["SieveAttention", "GatedAttentionPooling"]
    assert all(node["passed"] for node in nodes)
    outputs = {layer["label"]: layer for layer in _layers(report, "output")}
    logits = outputs["output logits"]["values"]["logits"]
    assert logits["agreement"] == "label agreement" and logits["argmax_agreement"] == 1.0
    gates = outputs["output gates"]["values"]["gates"]
    assert gates["kind"] == "gates" and gates["flips"] == 0 and gates["compared"] > 0


def test_debug_compare_names_the_sieve_node_where_int8_differs(tree):
    root, cli = tree
    if not (root / "int8.onnx").is_file():
        code, _ = cli("quantize", "sieve.onnx", "--out", "int8.onnx", "--json")
        assert code == 0
    code, report = cli("debug", "compare", "ckpt", "int8.onnx", "--against", "sieve.onnx",
                       "--shapes", "4x16", "--json")
    nodes = _layers(report, "node")
    assert [node["op_type"] for node in nodes] == ["SieveAttention", "GatedAttentionPooling"]
    # int8 MatMuls before the node differ beyond fp32's tolerance: exit 1, the node named
    assert code == 1 and not nodes[0]["passed"]
    assert report["first_divergence"] == {"kind": "node", "label": "layer 0", "index": 0}
    assert "SieveAttention" in report["verdict"]
    gates = {layer["label"]: layer for layer in _layers(report, "output")}["output gates"]
    assert gates["values"]["gates"]["flips"] == 0  # the scorer stayed fp32
