"""Converted BERT, RoBERTa and DistilBERT checkpoints through `export` and `validate`, every
variant: one `attndeploy` node per attention layer, symbolic dims, and fp32 parity with PyTorch
over a padded shape grid (onnxruntime with all and no optimizations, the ONNX reference
evaluator), as for built-in checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

pytest.importorskip("transformers")

from attndeploy.export.exporter import export_checkpoint, read_metadata  # noqa: E402
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer  # noqa: E402
from attndeploy.serving.packaging.repository import PackageOptions, package_model  # noqa: E402
from attndeploy.validate import ValidationOptions, validate_model, validate_module  # noqa: E402

from .hf_models import (  # noqa: E402
    LABELS,
    MODEL_TYPES,
    NUM_LABELS,
    VARIANTS,
    VOCAB,
    save_converted_checkpoint,
)

# padded shapes: seq 1, odd lengths, mixed lengths in one batch (validate/grid.py pads rows)
GRID = "1x1,3x1,2x5,4x17,3x32"
PARITY = {"atol": 1e-5, "rtol": 1e-4}  # fp32, within the 1e-4
LAYERS = {"evolving": 3}  # a Start -> EA -> EA chain; two layers elsewhere


def expected_nodes(variant: str, layers: int) -> dict[str, int]:
    return {
        "standard": {},
        "qvi": {"QVIAttention": layers},
        "ganet": {"GatedAttention": layers},
        "evolving": {"EvolvingAttentionStart": 1, "EvolvingAttention": layers - 1},
    }[variant]


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_export_has_one_node_per_layer_and_matches_pytorch_on_a_padded_grid(
    tmp_path: Path, model_type: str, variant: str
):
    layers = LAYERS.get(variant, 2)
    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", model_type, variant, layers=layers)
    onnx_path = tmp_path / "model.onnx"
    result = export_checkpoint(checkpoint, onnx_path)
    assert result.custom_nodes == expected_nodes(variant, layers)
    assert list(result.output_names) == (["logits", "gates"] if variant == "ganet"
                                         else ["logits"])
    report = validate_model(checkpoint, onnx_path, ValidationOptions(shapes=GRID, **PARITY))
    failures = [(o.name, o.message) for o in report.oracles.values() if not o.passed]
    assert report.passed, failures
    assert set(report.oracles) == {"onnxruntime[all]", "onnxruntime[none]", "onnx-reference"}


@pytest.mark.parametrize(("evolving_layers", "layers", "starts"), [
    ("upper_half", 4, 2), ("upper_third", 6, 4)])
def test_evolving_upper_layers_export_a_start_per_lower_layer_and_match_pytorch(
        tmp_path: Path, evolving_layers: str, layers: int, starts: int):
    """Evolving Attention's `evolving_layers` (the `train --hf-model` preset is "upper_half")
    goes through the checkpoint: the export has one `EvolvingAttentionStart` node per lower
    layer and one `EvolvingAttention` node per mixing layer, and matches PyTorch on the grid."""
    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", "bert", "evolving", layers=layers,
                                           options={"evolving_layers": evolving_layers})
    result = export_checkpoint(checkpoint, tmp_path / "model.onnx")
    assert result.custom_nodes == {"EvolvingAttentionStart": starts,
                                   "EvolvingAttention": layers - starts}
    report = validate_model(checkpoint, tmp_path / "model.onnx",
                            ValidationOptions(shapes=GRID, **PARITY))
    assert report.passed, [(o.name, o.message) for o in report.oracles.values() if not o.passed]


def test_export_metadata_says_what_serving_and_the_runtime_need(tmp_path: Path):
    tokenizer = WordPieceTokenizer.train(["w1 w2 alpha", "bravo w3 w4", "w5 charlie"] * 4)
    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", "bert", "ganet",
                                           tokenizer=tokenizer, max_seq=24)
    onnx_path = tmp_path / "model.onnx"
    export_checkpoint(checkpoint, onnx_path)
    meta = read_metadata(onnx_path)
    config = json.loads(meta["config"])
    assert meta["variant"] == config["variant"] == "ganet"
    assert meta["family"] == config["family"] == "hf"
    assert (config["head"], config["num_labels"], config["max_seq"]) == ("classification", 3, 24)
    assert config["vocab_size"] == 120
    assert meta["hf_architecture"] == "BertForSequenceClassification"
    assert meta["hf_model_type"] == "bert"
    assert json.loads(meta["labels"]) == list(LABELS)
    record = json.loads(meta["tokenizer"])
    assert record["type"] == "wordpiece" and record["pad_id"] == 0
    assert WordPieceTokenizer.from_dict(record) == tokenizer
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(graph.input) + list(graph.output)}
    assert dims == {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"],
                    "logits": ["batch", 3], "gates": ["batch", "seq"]}


def test_a_token_classifier_exports_per_token_logits(tmp_path: Path):
    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", "distilbert", "qvi", kind="tok")
    onnx_path = tmp_path / "model.onnx"
    export_checkpoint(checkpoint, onnx_path)
    assert json.loads(read_metadata(onnx_path)["config"])["head"] == "tagging"
    report = validate_model(checkpoint, onnx_path, ValidationOptions(shapes="2x5,3x9", **PARITY))
    assert report.passed


def test_package_takes_a_converted_checkpoint_like_a_built_in_one(tmp_path: Path):
    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", "roberta", "evolving")
    repo = tmp_path / "repo"
    packaged = package_model(checkpoint, repo, PackageOptions(name="ea", text=False),
                             exporter=export_checkpoint)
    assert [(p.name, p.variant, p.head, p.max_seq) for p in packaged] == [
        ("ea", "evolving", "classification", 32)]
    assert (repo / "ea" / "1" / "model.onnx").is_file()
    assert (repo / "ea" / "labels.txt").read_text().split() == list(LABELS)


def test_the_streamed_model_file_reads_back_as_the_proto(tmp_path: Path):
    import io

    from attndeploy.integrations.hf_export import write_model_streaming

    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", "bert", "evolving")
    onnx_path = tmp_path / "model.onnx"
    export_checkpoint(checkpoint, onnx_path)
    proto = onnx.load(str(onnx_path))
    buffer = io.BytesIO()
    write_model_streaming(proto, buffer)
    again = onnx.load_from_string(buffer.getvalue())
    assert again == proto
    assert [i.name for i in again.graph.initializer] == [i.name for i in proto.graph.initializer]


def test_a_failed_export_leaves_no_file_and_no_temporary(tmp_path: Path, monkeypatch):
    import attndeploy.integrations.hf_export as hf_export
    from attndeploy.errors import ExportError

    checkpoint = save_converted_checkpoint(tmp_path / "ckpt", "bert", "qvi")
    out = tmp_path / "out" / "model.onnx"

    def refuse(*args, **kwargs):
        raise ExportError("onnxruntime cannot run it (simulated)")

    monkeypatch.setattr(hf_export, "runtime_check", refuse)
    with pytest.raises(ExportError, match="simulated"):
        export_checkpoint(checkpoint, out)
    assert not out.exists()
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_export_model_takes_string_dims_on_a_converted_model_and_finds_the_position_limit(
    tmp_path: Path, model_type: str
):
    """docs/hugging-face.md's `dynamic_shapes` form, as a new user writes it: torch.export needs seq
    bounded by the position table, and export_model finds that bound itself."""
    import torch

    from attndeploy.export import export_model
    from attndeploy.integrations.transformers import convert

    from .hf_models import make_model, padded_batch

    model = convert(make_model(model_type), "evolving")
    ids, mask = padded_batch(2, 7)
    dims = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    result = export_model(model, tmp_path / "m.onnx", output_names=["logits"],
                          inputs={"input_ids": ids, "attention_mask": mask}, dynamic_shapes=dims)
    assert result.dim_bounds == {"seq": (1, 64)}
    assert result.custom_nodes == {"EvolvingAttentionStart": 1, "EvolvingAttention": 1}
    report = validate_module(model, tmp_path / "m.onnx", grid="1x1,3x17,2x64", vocab_size=VOCAB)
    assert report.passed, [(o.name, o.message) for o in report.oracles.values() if not o.passed]
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=mask).logits.shape == (2, NUM_LABELS)


def test_gates_kept_open_by_token_id_export_and_match_pytorch(tmp_path: Path):
    """GA-Net's `open_token_ids` become a few ops before the gated layers; the hard gates of the
    exported graph equal PyTorch's (validate counts flips) on ids that hold the kept tokens."""
    import torch

    from attndeploy.export import export_model
    from attndeploy.integrations.transformers import conversion_of, convert

    from .hf_models import make_model, padded_batch

    model = convert(make_model("bert"), "ganet", warm_start=False, open_token_ids=(5, 7))
    with torch.no_grad():  # close about half of the other keys
        conversion_of(model).gate_network.score.bias.fill_(-0.05)
    ids, mask = padded_batch(2, 7)
    ids[:, 0] = 5
    dims = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    export_model(model, tmp_path / "g.onnx", inputs={"input_ids": ids, "attention_mask": mask},
                 dynamic_shapes=dims, output_names=["logits"])
    report = validate_module(model, tmp_path / "g.onnx", grid="1x1,3x17,2x40", vocab_size=8)
    assert report.passed, [(o.name, o.message) for o in report.oracles.values() if not o.passed]


@pytest.mark.parametrize(("gated_layers", "layers", "open_layers"), [
    ("upper_half", 4, 2), ("upper_third", 6, 4)])
def test_upper_layer_gating_exports_one_gated_node_per_layer_and_matches_pytorch(
        tmp_path: Path, gated_layers: str, layers: int, open_layers: int):
    """GA-Net's `gated_layers="upper_half"` and `"upper_third"` (the `train --hf-model` preset):
    the lower layers' nodes get all-open logits built in the graph; every layer stays one
    `GatedAttention` node, and the exported gates and logits equal PyTorch's over a padded grid
    while about half of the keys are closed above."""
    import torch

    from attndeploy.export import export_model
    from attndeploy.integrations.transformers import conversion_of, convert, layer_modules

    from .hf_models import make_model, padded_batch

    model = convert(make_model("bert", layers=layers), "ganet", warm_start=False,
                    gated_layers=gated_layers)
    assert [m.open_gates for m in layer_modules(model)] == (
        [True] * open_layers + [False] * (layers - open_layers))
    with torch.no_grad():  # close about half of the keys
        conversion_of(model).gate_network.score.bias.fill_(-0.05)
    ids, mask = padded_batch(2, 7)
    dims = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    result = export_model(model, tmp_path / "u.onnx",
                          inputs={"input_ids": ids, "attention_mask": mask},
                          dynamic_shapes=dims, output_names=["logits"])
    assert result.custom_nodes == {"GatedAttention": layers}
    report = validate_module(model, tmp_path / "u.onnx", grid="1x1,3x17,2x40", vocab_size=8)
    assert report.passed, [(o.name, o.message) for o in report.oracles.values() if not o.passed]
