"""Export route of `PaddedBiLSTM`: every direction run becomes ONE standard ONNX `LSTM` node.

Letters: b batch, t position, f input features, h hidden size.

torch.export unrolls `nn.LSTM` over time and pins `seq` to the example's length. While the
exporter traces, `attndeploy.variants.api.override_lstm` routes each direction run to the
torch custom op `attndeploy_std::lstm` (its own namespace: the op is standard ONNX, not part of
the `attndeploy` domain of docs/ops.md), which `translate_lstm` turns into one `LSTM` node
(time-major between two Transposes: onnxruntime's CPU kernel refuses the batch-first `layout=1`),
with symbolic batch and seq, zero initial state and no `sequence_lens`: padding never reaches the
states of real tokens, because the forward direction reads them before any padding and the backward
one reverses each sequence within its own length (`variants.api.reverse_within_length`).

Weights enter in ONNX layout, converted once before tracing (`onnx_lstm_weights`) and held as
buffers of `LSTMWeights`, so the graph holds them as plain initializers (no Split/Concat left to
fold, whatever their size). ONNX orders the gates i, o, f, c where torch has i, f, g(=c), o, and
takes one bias `B = concat(W_b, R_b)` [1, 8h].

The node has the model's float type (float16 after `--fp16`, like the weights); onnxruntime 1.32's
CPU provider runs a float16 `LSTM` (measured). The eager op computes in float32 whatever the input
type and returns the input's type.
"""

from __future__ import annotations

import re

import torch
from onnxscript import opset18 as op
from torch import Tensor, nn

from attndeploy.errors import ExportError
from attndeploy.opspec.bodies import TFloat
from attndeploy.variants.api import PaddedBiLSTM

NAMESPACE = "attndeploy_std"
# Row blocks of torch's [4h, ...] LSTM weights (i, f, g, o) in ONNX gate order (i, o, f, c).
ONNX_GATES_FROM_TORCH = (0, 3, 1, 2)
# And back: torch gate k is ONNX block TORCH_GATES_FROM_ONNX[k].
TORCH_GATES_FROM_ONNX = (0, 2, 3, 1)
EAGER_DTYPE = torch.float32  # the eager op's compute type


def _reorder_gates(weight: Tensor, blocks: tuple[int, ...]) -> Tensor:
    """weight [4h, ...] -> the same rows with its four gate blocks in the order `blocks`."""
    gates = weight.chunk(4, dim=0)  # 4 x [h, ...]
    return torch.cat([gates[k] for k in blocks], dim=0)  # [4h, ...]


def onnx_lstm_weights(lstm: nn.LSTM) -> tuple[Tensor, Tensor, Tensor]:
    """The ONNX `LSTM` inputs W [1, 4h, f], R [1, 4h, h], B [1, 8h] of a one-layer forward LSTM.

    In the module's dtype. Refuses configurations the export route does not cover (several
    layers, bidirectional, projections, no bias, not batch-first).
    """
    unsupported = {
        "num_layers>1": lstm.num_layers != 1,
        "bidirectional": lstm.bidirectional,
        "proj_size": lstm.proj_size != 0,
        "bias=False": not lstm.bias,
        "batch_first=False": not lstm.batch_first,
    }
    bad = [name for name, flag in unsupported.items() if flag]
    if bad:
        raise ExportError(
            f"cannot export this nn.LSTM ({', '.join(bad)}): PaddedBiLSTM builds one-layer, "
            "unidirectional, batch-first LSTMs with biases"
        )
    with torch.no_grad():
        w = _reorder_gates(lstm.weight_ih_l0, ONNX_GATES_FROM_TORCH)  # [4h, f]
        r = _reorder_gates(lstm.weight_hh_l0, ONNX_GATES_FROM_TORCH)  # [4h, h]
        b = torch.cat([
            _reorder_gates(lstm.bias_ih_l0, ONNX_GATES_FROM_TORCH),
            _reorder_gates(lstm.bias_hh_l0, ONNX_GATES_FROM_TORCH),
        ])  # [8h]
    return w[None].contiguous(), r[None].contiguous(), b[None].contiguous()


# ----------------------------------------------------------------------------- the torch op


@torch.library.custom_op(f"{NAMESPACE}::lstm", mutates_args=())
def lstm(x: Tensor, w: Tensor, r: Tensor, b: Tensor, hidden_size: int) -> Tensor:
    """lstm(x [B,T,f], W [1,4h,f], R [1,4h,h], B [1,8h]; hidden_size) -> Y [B,T,h]

    ONNX `LSTM` on batch-first tensors (one forward direction, zero initial state) evaluated with
    `torch.lstm` in float32; Y has x's dtype. Gates i, o, f, c as ONNX orders them.
    """
    weights = [
        _reorder_gates(w[0], TORCH_GATES_FROM_ONNX),  # weight_ih [4h, f]
        _reorder_gates(r[0], TORCH_GATES_FROM_ONNX),  # weight_hh [4h, h]
        _reorder_gates(b[0, : 4 * hidden_size], TORCH_GATES_FROM_ONNX),  # bias_ih [4h]
        _reorder_gates(b[0, 4 * hidden_size :], TORCH_GATES_FROM_ONNX),  # bias_hh [4h]
    ]
    weights = [weight.to(EAGER_DTYPE) for weight in weights]
    state = x.new_zeros((1, x.shape[0], hidden_size), dtype=EAGER_DTYPE)  # [1, B, h]
    y, _, _ = torch.lstm(
        x.to(EAGER_DTYPE), (state, state), weights,
        True, 1, 0.0, False, False, True,  # has_biases, layers, dropout, train, bidir, batch_first
    )
    return y.to(x.dtype).contiguous()  # [B, T, h] (torch.lstm's batch-first output is a view)


@lstm.register_fake
def _(x, w, r, b, hidden_size):
    return x.new_empty((x.shape[0], x.shape[1], hidden_size))  # [B, T, h]


def translate_lstm(x: TFloat, w: TFloat, r: TFloat, b: TFloat, hidden_size: int) -> TFloat:
    """Emit one ONNX `LSTM` node, time-major (`layout=0`) between two Transposes.

    onnxruntime's CPU LSTM refuses `layout=1` ("Batchwise recurrent operations (layout == 1) are
    not supported", onnxruntime 1.32), so the batch-first tensors are transposed around the
    node: [B,T,f] -> [T,B,f] -> LSTM -> Y [T,1,B,h] -> [B,T,h].
    """
    x_tbf = op.Transpose(x, perm=[1, 0, 2])  # [T, B, f]
    y, _, _ = op.LSTM(x_tbf, w, r, b, hidden_size=hidden_size)  # [T, 1, B, h]
    y = op.Squeeze(y, op.Constant(value_ints=[1]))  # [T, B, h]
    return op.Transpose(y, perm=[1, 0, 2])  # [B, T, h]


def custom_translation_table() -> dict[torch._ops.OpOverload, object]:
    """For torch.onnx: `attndeploy_std::lstm` -> one ONNX `LSTM` node."""
    return {torch.ops.attndeploy_std.lstm.default: translate_lstm}


# ----------------------------------------------------------------------------- export state


def _buffer_name(path: str) -> str:
    return re.sub(r"\W", "_", path)


class LSTMWeights(nn.Module):
    """The ONNX-layout weights of every LSTM of a model's `PaddedBiLSTM`s, as buffers.

    The exporter attaches it beside the model it traces and enters
    `override_lstm(weights.run)`: each direction run then calls the custom op on these buffers
    (initializers named `lstm_weights.<module path>_{W,R,B}`).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._names: dict[int, tuple[str, int]] = {}  # id(nn.LSTM) -> (buffer prefix, h)
        for path, module in model.named_modules():
            if not isinstance(module, PaddedBiLSTM):
                continue
            for sub_path, sub in module.named_modules():
                if not isinstance(sub, nn.LSTM):
                    continue
                prefix = _buffer_name(f"{path}.{sub_path}")
                for suffix, tensor in zip("WRB", onnx_lstm_weights(sub), strict=True):
                    self.register_buffer(f"{prefix}_{suffix}", tensor)
                self._names[id(sub)] = (prefix, sub.hidden_size)

    def __len__(self) -> int:
        return len(self._names)

    def run(self, module: nn.LSTM, x: Tensor) -> Tensor:
        """`_recurrent.LSTMRunner`: one direction run as `attndeploy_std::lstm`."""
        try:
            prefix, hidden_size = self._names[id(module)]
        except KeyError:
            raise ExportError(
                "an nn.LSTM outside PaddedBiLSTM ran during export; only PaddedBiLSTM's "
                "direction runs have an ONNX route"
            ) from None
        w, r, b = (getattr(self, f"{prefix}_{suffix}") for suffix in "WRB")
        return torch.ops.attndeploy_std.lstm(x, w, r, b, hidden_size)  # [B, T, h]
