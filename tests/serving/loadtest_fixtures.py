"""A tiny model repository for the client and load-test tests (no dependency on `repository.py`).

The model follows the model-level interface of `docs/ops.md`: `input_ids` / `attention_mask` INT64
`[batch, seq]` in, `logits` FP32 `[batch, num_labels]` and `gates` BOOL `[batch, seq]` out (as a
GA-Net model would). `1/model.onnx` is built with `onnx.helper`; `1/model.py` is a python-backend
model that runs it with onnxruntime, batching same-length requests into one session call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TINY_MODEL = "tiny"
TINY_VOCAB = 50
TINY_DIM = 8
TINY_LABELS = 3

# b batch, s seq, d embedding width, l labels.
TINY_CONFIG = f"""\
name: "{TINY_MODEL}"
backend: "python"
max_batch_size: 8
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: false }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: false }}
]
output [
  {{ name: "logits" data_type: TYPE_FP32 dims: [ {TINY_LABELS} ] }},
  {{ name: "gates" data_type: TYPE_BOOL dims: [ -1 ] }}
]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

TINY_MODEL_PY = '''\
"""Runs 1/model.onnx with onnxruntime; requests of equal shape share one session call."""

import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

INPUTS = ("input_ids", "attention_mask")
OUTPUTS = ("logits", "gates")


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            path, sess_options=options, providers=["CPUExecutionProvider"]
        )

    def execute(self, requests):
        feeds = [
            {n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in INPUTS}
            for r in requests
        ]
        responses = [None] * len(requests)
        groups = {}
        for index, feed in enumerate(feeds):
            groups.setdefault(feed["input_ids"].shape[1:], []).append(index)
        for indices in groups.values():
            batch = {n: np.concatenate([feeds[i][n] for i in indices]) for n in INPUTS}
            try:
                outputs = self.session.run(list(OUTPUTS), batch)
            except Exception as exc:  # one error response per request, the server stays up
                for i in indices:
                    responses[i] = pb_utils.InferenceResponse(
                        output_tensors=[], error=pb_utils.TritonError(str(exc))
                    )
                continue
            start = 0
            for i in indices:
                rows = feeds[i]["input_ids"].shape[0]
                tensors = [
                    pb_utils.Tensor(n, np.ascontiguousarray(o[start:start + rows]))
                    for n, o in zip(OUTPUTS, outputs)
                ]
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
                start += rows
        return responses
'''


def build_tiny_onnx(path: Path, *, seed: int = 0) -> Path:
    """Write the tiny classifier: masked mean of embeddings -> linear logits; gates per token.

    logits = (sum_s E[ids] * m) / sum_s m @ W + c      [b, l]
    gates  = (g[ids] > 0) AND m                          [b, s]
    """
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((TINY_VOCAB, TINY_DIM)).astype(np.float32)  # [V, d]
    weight = rng.standard_normal((TINY_DIM, TINY_LABELS)).astype(np.float32)  # [d, l]
    bias = rng.standard_normal((TINY_LABELS,)).astype(np.float32)  # [l]
    gate = rng.standard_normal((TINY_VOCAB,)).astype(np.float32)  # [V]
    inits = [
        numpy_helper.from_array(emb, "emb"),
        numpy_helper.from_array(weight, "weight"),
        numpy_helper.from_array(bias, "bias"),
        numpy_helper.from_array(gate, "gate"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["x"]),  # [b, s, d]
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),  # [b, s]
        helper.make_node("Unsqueeze", ["m", "axis2"], ["m3"]),  # [b, s, 1]
        helper.make_node("Mul", ["x", "m3"], ["xm"]),  # [b, s, d]
        helper.make_node("ReduceSum", ["xm", "axis1"], ["total"], keepdims=0),  # [b, d]
        helper.make_node("ReduceSum", ["m", "axis1"], ["count"], keepdims=1),  # [b, 1]
        helper.make_node("Div", ["total", "count"], ["mean"]),  # [b, d]
        helper.make_node("MatMul", ["mean", "weight"], ["mw"]),  # [b, l]
        helper.make_node("Add", ["mw", "bias"], ["logits"]),  # [b, l]
        helper.make_node("Gather", ["gate", "input_ids"], ["g"]),  # [b, s]
        helper.make_node("Greater", ["g", "zero"], ["open"]),  # [b, s]
        helper.make_node("Cast", ["attention_mask"], ["real"], to=TensorProto.BOOL),  # [b, s]
        helper.make_node("And", ["open", "real"], ["gates"]),  # [b, s]
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_classifier",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", TINY_LABELS]),
            helper.make_tensor_value_info("gates", TensorProto.BOOL, ["batch", "seq"]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def write_tiny_repository(root: Path) -> Path:
    """Create `<root>/tiny/{config.pbtxt, 1/model.py, 1/model.onnx}`; return the repository root."""
    model_dir = Path(root) / TINY_MODEL
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(TINY_CONFIG)
    (model_dir / "1" / "model.py").write_text(TINY_MODEL_PY)
    build_tiny_onnx(model_dir / "1" / "model.onnx")
    return Path(root)


def tiny_onnx_path(repo: Path) -> Path:
    return Path(repo) / TINY_MODEL / "1" / "model.onnx"
