"""int8 of a converted Hugging Face GA-Net: `quantize` finds its gate network (the `GateNetwork`
module the conversion registers under the embeddings) and keeps it in fp32, so the hard gates
decide as in fp32."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attndeploy.quantize import QuantizeOptions, quantize_model  # noqa: E402
from attndeploy.quantize.quantizer import gate_network_matmuls  # noqa: E402
from tests.quantize.test_quantize import fp32_matmuls  # noqa: E402


def test_a_converted_ganets_gate_network_stays_fp32(hf_text_exports, tmp_path: Path):
    source = hf_text_exports["ga_distilbert"].path
    gate_network = gate_network_matmuls(onnx.load(str(source)))
    assert len(gate_network) == 2  # the MLP's two Linear layers
    # a random model's logits move more than a trained one's: the tolerance is not the point
    result = quantize_model(source, tmp_path / "int8.onnx",
                            QuantizeOptions(threads=1, max_logit_change=100.0))
    assert result.passed and result.chosen.gate_network == gate_network
    assert result.chosen.grid.gate_flips == 0
    assert set(gate_network) <= fp32_matmuls(tmp_path / "int8.onnx")


def test_the_worst_layer_kept_in_fp32_names_only_the_matmuls_int8_would_quantize(tmp_path):
    """A converted standard BERT computes attention's two products as MatMuls of activations
    in the main graph; `--exclude-worst` keeps only the block's weight MatMuls in fp32 (the
    others are never int8), so the count `quantize` prints is what int8 gave up."""
    from attndeploy.export.exporter import export_checkpoint

    from .hf_models import save_text_checkpoint

    checkpoint = save_text_checkpoint(tmp_path / "ckpt", "bert", "standard", layers=2)
    source = export_checkpoint(checkpoint, tmp_path / "bert.onnx").path
    graph = onnx.load(str(source)).graph
    weights = {tensor.name for tensor in graph.initializer}
    weighted = {node.name for node in graph.node
                if node.op_type in ("MatMul", "Gemm") and node.input[1] in weights}
    result = quantize_model(source, tmp_path / "int8.onnx",
                            QuantizeOptions(threads=1, exclude_worst=1, max_logit_change=100.0))
    chosen = result.chosen
    assert set(chosen.ranking[0]["matmuls"]) - weighted  # the block holds activation MatMuls
    assert chosen.worst == [name for name in chosen.ranking[0]["matmuls"] if name in weighted]
    assert chosen.quantized_nodes + len(chosen.worst) == len(weighted)
