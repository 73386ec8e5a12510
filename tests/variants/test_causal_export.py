"""A causal stack exports with its cache as one ONNX graph (issue #49), from the causal table.

The graph takes the new tokens, the mask over every token seen and each layer's past state, and
returns the output and the present state, named by Optimum's convention; each attention layer is
one `attndeploy` node with its function. The same graph prefills from an empty past (P = 0) and
decodes step by step, and onnxruntime matches PyTorch at every step. (The model family's own
export, with embeddings, logits and metadata, is the lead's; this holds the layers to it.)

Letters: b batch, n new tokens, P cached tokens, D model dim.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from attndeploy.export.tracing import attach_functions, to_onnx
from attndeploy.opspec.bodies import DOMAIN
from tests.variants.causal_cases import CAUSAL_CASES, D_MODEL, FP32_TOLERANCE, left_padded

BATCH, TRACED_PAST, TRACED_NEW = 2, 7, 2  # sizes traced with: none may be 0 or 1, or alike
STEPS = (3, 1, 1, 2, 1)  # a prefill from the empty past, then decode steps


class FlatStep(nn.Module):
    """The stack with flat inputs and outputs: (x, mask, *past) -> (y, *present)."""

    def __init__(self, stack: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.stack = stack
        self.names = names

    def forward(self, x, mask, *past):
        y, present = self.stack(x, mask, dict(zip(self.names, past, strict=True)))
        return (y, *[present[name] for name in self.names])


def _onnx_name(name: str, prefix: str) -> str:
    """`past_key_values.0.key` as the graph's input, `present.0.key` as its output; the gate
    network's model-level state `gates.X` as `past_gates.X` and `present_gates.X`."""
    if name.startswith("gates."):
        return f"{prefix}_{name}"
    return name if prefix == "past" else name.replace("past_key_values.", "present.", 1)


BATCH_DIM = torch.export.Dim("batch", min=1, max=1024)
NEW_DIM = torch.export.Dim("new_tokens", min=1, max=4096)
PAST_DIM = torch.export.Dim("past", min=0, max=4096)  # cached tokens (GA-Net: open ones)
PAST_AXIS = {"key": 2, "value": 2, "key_mask": 1, "evolving_rows": 3}  # the rest: batch only


def _state_dims(name: str) -> dict[int, torch.export.Dim]:
    axis = PAST_AXIS.get(name.rsplit(".", 1)[-1])
    return {0: BATCH_DIM} if axis is None else {0: BATCH_DIM, axis: PAST_DIM}


def _export(case) -> tuple[nn.Module, list[str], onnx.ModelProto]:
    stack = case.stack()
    total = TRACED_PAST + TRACED_NEW
    x = torch.randn(BATCH, total, D_MODEL, generator=torch.Generator().manual_seed(2))
    mask = left_padded(BATCH, total)
    names = list(stack.empty_state(BATCH, x))
    with torch.no_grad():
        _, past = stack(x[:, :TRACED_PAST], mask[:, :TRACED_PAST])
    # Contiguous copies: a view's storage size enters torch.export's guards (16·n != 144).
    args = tuple(a.clone() for a in (x[:, TRACED_PAST:], mask, *[past[n] for n in names]))
    dynamic = ({0: BATCH_DIM, 1: NEW_DIM}, {0: BATCH_DIM, 1: torch.export.Dim.AUTO},
               tuple(_state_dims(name) for name in names))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(FlatStep(stack, names).eval(), args,
                                      dynamic_shapes=dynamic)
        onnx_program = to_onnx(program, 18, SimpleNamespace(
            input_names=["x", "attention_mask", *[_onnx_name(n, "past") for n in names]],
            output_names=["y", *[_onnx_name(n, "present") for n in names]],
        ))  # the exporter's own route (its translation table holds the causal ops)
    model = attach_functions(onnx_program.model_proto, 18, inline=False)
    return stack, names, model


@pytest.mark.parametrize("case", [
    pytest.param(case, id=case.id, marks=pytest.mark.xfail(strict=True, reason=case.no_export))
    if case.no_export else pytest.param(case, id=case.id)
    for case in CAUSAL_CASES
])
def test_a_causal_stack_exports_one_graph_that_prefills_and_decodes(case):
    stack, names, model = _export(case)
    nodes = [n for n in model.graph.node if n.domain == DOMAIN]
    if case.variant != "standard":
        assert len(nodes) == len(stack.layers), "one attndeploy node per attention layer"
        assert {n.op_type for n in nodes} <= {f.name for f in model.functions}
    outputs = [o.name for o in model.graph.output]
    assert "present.0.key" in outputs and "present.0.value" in outputs
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [i.name for i in session.get_inputs()]

    x = torch.randn(BATCH, sum(STEPS), D_MODEL, generator=torch.Generator().manual_seed(6))
    mask = left_padded(BATCH, sum(STEPS))
    with torch.no_grad():
        state = stack.empty_state(BATCH, x)
    onnx_state = {name: value.numpy() for name, value in state.items()}
    seen = 0
    for size in STEPS:
        chunk, seen_mask = x[:, seen:seen + size], mask[:, :seen + size]
        with torch.no_grad():
            want, state = stack(chunk, seen_mask, state)
        values = [chunk.numpy(), seen_mask.numpy(), *[onnx_state[n] for n in names]]
        got = session.run(None, dict(zip(feeds, values, strict=True)))
        onnx_state = dict(zip(names, got[1:], strict=True))
        assert np.abs(got[0] - want.numpy()).max() <= FP32_TOLERANCE, f"output after {seen}"
        for name in names:
            assert onnx_state[name].shape == tuple(state[name].shape), name
            if state[name].numel():
                err = np.abs(onnx_state[name].astype(np.float32) - state[name].float().numpy())
                assert err.max() <= FP32_TOLERANCE, f"{name} after {seen}"
        seen += size
