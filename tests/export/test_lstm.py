"""The export route of `PaddedBiLSTM` (attndeploy/export/lstm.py): each direction run is one
standard ONNX `LSTM` node with symbolic batch and seq; training keeps `nn.LSTM`.

Letters: b batch, t position, f features, h hidden.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from attndeploy.errors import ExportError
from attndeploy.export import lstm, tracing
from attndeploy.variants import _recurrent
from attndeploy.variants.api import PaddedBiLSTM, override_lstm, run_lstm
from tests.helpers import assert_close, lengths_mask, randn

F, H = 5, 4
# torch.onnx's public route (used below) warns about its own pytree internals.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_onnx_weights_put_the_gates_in_onnx_order_i_o_f_c():
    module = nn.LSTM(F, H, batch_first=True)
    w, r, b = lstm.onnx_lstm_weights(module)
    assert (w.shape, r.shape, b.shape) == ((1, 4 * H, F), (1, 4 * H, H), (1, 8 * H))
    i, f, g, o = module.weight_ih_l0.detach().chunk(4)  # torch: i, f, g, o
    torch.testing.assert_close(w[0], torch.cat([i, o, f, g]))
    i, f, g, o = module.weight_hh_l0.detach().chunk(4)
    torch.testing.assert_close(r[0], torch.cat([i, o, f, g]))
    bias_w, bias_r = b[0].chunk(2)  # B = concat(W_b, R_b)
    i, f, g, o = module.bias_ih_l0.detach().chunk(4)
    torch.testing.assert_close(bias_w, torch.cat([i, o, f, g]))
    i, f, g, o = module.bias_hh_l0.detach().chunk(4)
    torch.testing.assert_close(bias_r, torch.cat([i, o, f, g]))


def test_the_custom_op_equals_nn_lstm_and_passes_opcheck():
    module = nn.LSTM(F, H, batch_first=True)
    x = randn(3, 7, F)
    w, r, b = lstm.onnx_lstm_weights(module)
    with torch.no_grad():
        want, _ = module(x)
    got = torch.ops.attndeploy_std.lstm(x, w, r, b, H)
    assert_close(got, want, (1e-6, 1e-5))
    torch.library.opcheck(torch.ops.attndeploy_std.lstm.default, (x, w, r, b, H))
    half = torch.ops.attndeploy_std.lstm(x.half(), w.half(), r.half(), b.half(), H)
    assert half.dtype == torch.float16  # computed in fp32, returned in the input's type
    assert_close(half.float(), want, (1e-2, 1e-2))


@pytest.mark.parametrize(
    "change", [{"num_layers": 2}, {"bidirectional": True}, {"proj_size": 2}, {"bias": False},
               {"batch_first": False}],
)
def test_lstm_configurations_without_an_export_route_are_refused(change):
    with pytest.raises(ExportError, match="cannot export this nn.LSTM"):
        lstm.onnx_lstm_weights(nn.LSTM(F, H, **{"batch_first": True, **change}))


def test_training_runs_nn_lstm_and_the_override_only_inside_its_block():
    module = PaddedBiLSTM(F, H, num_layers=2).train()
    x, mask = randn(2, 6, F), lengths_mask([6, 3])
    module(x, mask).sum().backward()
    assert module.forward_layers[0].weight_ih_l0.grad is not None, "gradients reach nn.LSTM"
    calls = []

    def runner(lstm_module: nn.LSTM, inputs: torch.Tensor) -> torch.Tensor:
        calls.append(lstm_module)
        outputs, _ = lstm_module(inputs)
        return outputs

    with override_lstm(runner):
        module(x, mask)
    assert len(calls) == 4  # 2 layers x 2 directions
    assert _recurrent._runner is None, "the override ends with its block"
    run_lstm(module.forward_layers[0], x)
    assert len(calls) == 4


def test_an_lstm_outside_padded_bilstm_has_no_route():
    holder = nn.Module()
    holder.rnn = PaddedBiLSTM(F, H)
    weights = lstm.LSTMWeights(holder)
    assert len(weights) == 2
    with pytest.raises(ExportError, match="outside PaddedBiLSTM"):
        weights.run(nn.LSTM(F, H, batch_first=True), randn(1, 2, F))


class _BiLSTMBlock(nn.Module):
    """x [B, T, F], mask [B, T] -> PaddedBiLSTM states [B, T, 2h], with the export weights."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = PaddedBiLSTM(F, H, num_layers=2)
        self.lstm_weights = lstm.LSTMWeights(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.rnn(x, mask)


@pytest.fixture(scope="module")
def exported_block() -> tuple[_BiLSTMBlock, onnx.ModelProto]:
    """The block through the exporter's public-API route (`torch.onnx.export(program, ...)`,
    taken when torch lacks the internals of the cached registry): covered here, where it
    costs one export that this module needs anyway."""
    torch.manual_seed(7)
    block = _BiLSTMBlock().eval()
    example = (randn(2, 8, F), lengths_mask([8, 5]))
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=64)
    with override_lstm(block.lstm_weights.run):
        program = torch.export.export(
            block, example, dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
            strict=False,
        )
    names = SimpleNamespace(input_names=["x", "mask"], output_names=["states"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracing, "onnx_registry", lambda opset: None)
        onnx_program = tracing.to_onnx(program, 18, names)
    return block, onnx_program.model_proto


def test_each_direction_run_is_one_lstm_node_with_symbolic_batch_and_seq(exported_block):
    _, model = exported_block
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["LSTM"] == 4 and not {"Loop", "Scan"} & set(ops)
    for node in model.graph.node:
        if node.op_type == "LSTM":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            assert attrs["hidden_size"] == H
            assert attrs.get("layout", 0) == 0  # onnxruntime's CPU kernel refuses layout=1
            assert attrs.get("direction", b"forward") == b"forward"
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param and dims[1].dim_param, f"{value.name} lost a symbolic dim"
    initializers = {t.name for t in model.graph.initializer}
    assert {f"lstm_weights.rnn_forward_layers_0_{k}" for k in "WRB"} <= initializers


def test_onnxruntime_matches_the_eager_bilstm_and_ignores_padding(exported_block):
    block, model = exported_block
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for lengths, width in (((11, 6, 1), 11), ((1,), 1), ((3, 3), 3)):
        x, mask = randn(len(lengths), width, F, seed=width), lengths_mask(lengths, width)
        (got,) = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})
        with torch.no_grad():
            want = block(x, mask)  # nn.LSTM: the override is not active here
        assert_close(torch.from_numpy(got), want, (1e-5, 1e-4))
    # The states of real tokens do not depend on how much padding follows them.
    x, mask = randn(2, 4, F, seed=1), lengths_mask([4, 2], 4)
    padded_x = torch.cat([x, randn(2, 5, F, seed=2)], dim=1)  # garbage in the padding
    padded_mask = torch.cat([mask, torch.zeros(2, 5, dtype=torch.bool)], dim=1)
    (short,) = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})
    (long,) = session.run(None, {"x": padded_x.numpy(), "mask": padded_mask.numpy()})
    real = mask.numpy()
    np.testing.assert_allclose(long[:, :4][real], short[real], atol=1e-6)
