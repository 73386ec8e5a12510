"""`export_model`, the generic exporter: output structures, names, dims and its refusals.

The layer-by-layer parity of `attndeploy.nn` models lives in tests/nn/test_export.py; here the
models are small and the focus is on the exporter's contract for any model.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import Tensor, nn

from attndeploy.errors import ExportError
from attndeploy.export import export_model
from attndeploy.export.exporter import read_metadata
from attndeploy.export.generic import output_items
from attndeploy.nn import GatedAttention, QVIAttention

pytestmark = pytest.mark.usefixtures("torch_defaults")

D = 8


class FakeModelOutput(OrderedDict):
    """What a Hugging Face `ModelOutput` looks like to the exporter: keys and `to_tuple`."""

    def to_tuple(self) -> tuple:
        return tuple(self.values())


class Encoder(nn.Module):
    """x [B, T, D] float and a bool mask in; the output structure is chosen per test."""

    def __init__(self, returns: str = "dict") -> None:
        super().__init__()
        self.attention = QVIAttention(D, 2)
        self.returns = returns

    def forward(self, x: Tensor, key_padding_mask: Tensor):
        y = self.attention(x, key_padding_mask)  # [B, T, D]
        pooled = y.mean(1)  # [B, D]
        if self.returns == "tensor":
            return y
        if self.returns == "tuple":
            return y, pooled
        if self.returns == "model_output":
            return FakeModelOutput(last_hidden_state=y, pooler_output=pooled, attentions=None)
        return {"hidden": y, "pooled": pooled}


def inputs(batch: int = 2, seq: int = 5) -> dict[str, Tensor]:
    mask = torch.ones(batch, seq, dtype=torch.bool)
    mask[-1, 2:] = False
    return {"x": torch.randn(batch, seq, D), "key_padding_mask": mask}


DYNAMIC = {"x": {0: "batch", 1: "seq"}, "key_padding_mask": {0: "batch", 1: "seq"}}


def run(path, feed: dict[str, Tensor]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {k: v.numpy() for k, v in feed.items()})
    return dict(zip(names, values, strict=True))


@pytest.mark.parametrize("returns, names", [
    ("tensor", ("output",)),
    ("tuple", ("output_0", "output_1")),
    ("dict", ("hidden", "pooled")),
    ("model_output", ("last_hidden_state", "pooler_output")),  # None entries left out
])
def test_tensor_tuple_dict_and_model_output_are_exported_with_their_names(
    tmp_path, returns, names
):
    model = Encoder(returns)
    result = export_model(model, tmp_path / "m.onnx", inputs=inputs(), dynamic_shapes=DYNAMIC)
    assert result.output_names == names and result.input_names == ("x", "key_padding_mask")
    feed = inputs(3, 7)
    got = run(result.path, feed)
    with torch.no_grad():
        want = output_items(model(**feed), None)
    assert list(got) == list(names)
    for (name, value), expected in zip(got.items(), want, strict=True):
        assert expected[0] == name
        real = feed["key_padding_mask"].numpy()
        ref = expected[1].numpy()
        if value.ndim == 3:
            value, ref = value[real], ref[real]
        np.testing.assert_allclose(value, ref, atol=1e-5, rtol=1e-4)
    model_proto = onnx.load(str(result.path))
    out_dims = [d.dim_param or d.dim_value
                for d in model_proto.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims[:2] == ["batch", "seq"]  # the first output is the states [B, T, D]
    assert result.custom_nodes == {"QVIAttention": 1}


def test_output_names_name_a_tuple_and_pick_dict_keys_in_their_order(tmp_path):
    result = export_model(Encoder("tuple"), tmp_path / "t.onnx", inputs=inputs(),
                          dynamic_shapes=DYNAMIC, output_names=["states", "summary"])
    assert result.output_names == ("states", "summary")
    result = export_model(Encoder("dict"), tmp_path / "d.onnx", inputs=inputs(),
                          dynamic_shapes=DYNAMIC, output_names=["pooled"])
    assert result.output_names == ("pooled",)
    with pytest.raises(ExportError, match="not keys"):
        export_model(Encoder("dict"), tmp_path / "x.onnx", inputs=inputs(),
                     output_names=["logits"])
    with pytest.raises(ExportError, match="2 outputs"):
        export_model(Encoder("tuple"), tmp_path / "y.onnx", inputs=inputs(),
                     output_names=["one"])


def test_metadata_records_opset_and_dynamic_axes_and_keeps_the_callers(tmp_path):
    path = tmp_path / "m.onnx"
    export_model(Encoder(), path, inputs=inputs(), dynamic_shapes=DYNAMIC,
                 metadata={"team.model": "encoder-v3"})
    meta = read_metadata(path)
    assert meta["opset"] == "18" and meta["inlined"] == "false"
    assert meta["dynamic_axes"] == (
        '{"key_padding_mask": {"0": "batch", "1": "seq"}, "x": {"0": "batch", "1": "seq"}}'
    )
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert props["team.model"] == "encoder-v3"


def test_the_model_is_traced_in_eval_mode_and_its_flags_are_restored(tmp_path):
    model = Encoder().train()
    model.attention.eval()  # a mixed state, restored module by module
    export_model(model, tmp_path / "m.onnx", inputs=inputs(), dynamic_shapes=DYNAMIC)
    assert model.training and not model.attention.training


class Sampler(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x + torch.rand_like(x)


class PinsSeq(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x[:, :4] * 2 if x.shape[1] > 4 else x  # specialises seq


class FixedSize(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(6))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.weight  # [B, 6]: seq can only be 6


class PositionTable(nn.Module):
    """Adds rows of a 16-row table, as BERT adds position embeddings: seq <= 16."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(16, D))
        self.attention = QVIAttention(D, 2)

    def forward(self, x: Tensor, key_padding_mask: Tensor) -> Tensor:
        return self.attention(x + self.table[: x.shape[1]], key_padding_mask)  # [B, T, D]


def test_a_named_dim_the_model_bounds_is_narrowed_and_reported(tmp_path):
    result = export_model(PositionTable(), tmp_path / "p.onnx", inputs=inputs(),
                          dynamic_shapes=DYNAMIC)
    assert result.dim_bounds == {"seq": (1, 16)}
    assert result.to_json()["dim_bounds"] == {"seq": [1, 16]}
    assert read_metadata(tmp_path / "p.onnx")["dim_bounds"] == '{"seq": [1, 16]}'
    assert run(tmp_path / "p.onnx", inputs(batch=3, seq=16))["output"].shape == (3, 16, D)


def test_dim_objects_stand_in_for_names_and_keep_their_bounds(tmp_path):
    seq = torch.export.Dim("seq", min=1, max=16)
    dims = {"x": {0: "batch", 1: seq}, "key_padding_mask": {0: "batch", 1: seq}}
    result = export_model(PositionTable(), tmp_path / "p.onnx", inputs=inputs(),
                          dynamic_shapes=dims)
    assert result.dim_bounds == {}  # nothing needed narrowing
    with pytest.raises(ExportError, match="a name or a torch.export.Dim, not int"):
        export_model(PositionTable(), tmp_path / "q.onnx", inputs=inputs(),
                     dynamic_shapes={"x": {1: 5}})


def test_refusals_leave_no_file(tmp_path):
    path = tmp_path / "m.onnx"
    x = torch.randn(2, 6)
    with pytest.raises(ExportError, match="random ops"):
        export_model(Sampler(), path, inputs={"x": x}, dynamic_shapes={"x": {0: "batch"}})
    with pytest.raises(ExportError, match=r"^dynamic dim 'seq' would only take sizes >= 5"):
        export_model(PinsSeq(), path, inputs={"x": x}, dynamic_shapes={"x": {1: "seq"}})
    with pytest.raises(ExportError, match=r"^dynamic dim 'seq' cannot stay dynamic: .* to 6"):
        export_model(FixedSize(), path, inputs={"x": x}, dynamic_shapes={"x": {1: "seq"}})
    with pytest.raises(ExportError, match="sizes 0 and 1"):
        export_model(Sampler(), path, inputs={"x": x[:1]}, dynamic_shapes={"x": {0: "batch"}})
    with pytest.raises(ExportError, match="unknown input"):
        export_model(Sampler(), path, inputs={"x": x}, dynamic_shapes={"y": {0: "batch"}})
    with pytest.raises(ExportError, match="dict of tensors"):
        export_model(Sampler(), path, inputs={"x": [1, 2]})
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_a_gated_layer_sampling_gates_in_training_still_exports_deterministically(tmp_path):
    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = GatedAttention(D, 2)

        def forward(self, x: Tensor, mask: Tensor, gate_logits: Tensor):
            return self.attention(x, mask, gate_logits)

    feed = {**inputs(), "gate_logits": torch.randn(2, 5)}
    feed = {"x": feed["x"], "mask": feed["key_padding_mask"], "gate_logits": feed["gate_logits"]}
    dims = {name: {0: "batch", 1: "seq"} for name in feed}
    result = export_model(Gated().train(), tmp_path / "g.onnx", inputs=feed, dynamic_shapes=dims)
    assert result.custom_nodes == {"GatedAttention": 1}
    assert result.output_names == ("output_0", "output_1")
