"""Small hand-built ONNX models with the attndeploy model-level interface, for serving tests.

They stand in for exported models: `input_ids`/`attention_mask` int64 `[batch, seq]` in,
`logits` out (`[batch, num_labels]`, or `[batch, seq, num_labels]` for tagging), plus
`gates` bool `[batch, seq]` for the GA-Net-like one, and the `attndeploy.*` metadata_props.

Padding invariance is exact, not approximate: embeddings, weights and biases are multiples of
1/8 in [-1, 1], so every sum over real tokens (a masked sum of embeddings, then a MatMul) is
exact in float32 whatever the order of the additions or the number of zero (padding) terms;
only the last elementwise ops (divide by the token count, add the bias) round, once, the same
way for every batch layout. So a request's outputs are bit-identical whether it runs alone or
padded inside a larger batch, which is what the python flavour's batching relies on.

With `custom_op=True` the masked sum is one `attndeploy::MaskedSum` node backed by a model-local
FunctionProto (as the exporter writes the attention ops); `with_function=False` drops the
function, which `onnx.checker` accepts but onnxruntime and check-repo reject.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
CUSTOM_DOMAIN = "attndeploy"
VERSION = "0.1.0"


def _dyadic(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/8 in [-1, 1]: sums of these stay exact in float32."""
    return (rng.integers(-8, 9, size=shape) / 8.0).astype(np.float32)


def _masked_sum_function() -> onnx.FunctionProto:
    """`attndeploy::MaskedSum(values [B,T,D], mask [B,T] float) -> [B,D]`: Σ_t mask_t · values_t."""
    nodes = [
        helper.make_node("Constant", [], ["axis2"],
                         value=numpy_helper.from_array(np.array([2], np.int64))),
        helper.make_node("Constant", [], ["axis1"],
                         value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),  # [B, T, 1]
        helper.make_node("Mul", ["values", "mask3"], ["masked"]),  # [B, T, D]
        helper.make_node("ReduceSum", ["masked", "axis1"], ["total"], keepdims=0),  # [B, D]
    ]
    return helper.make_function(
        CUSTOM_DOMAIN, "MaskedSum", ["values", "mask"], ["total"], nodes,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )


def build_model(
    *,
    head: str = "classification",
    gated: bool = False,
    custom_op: bool = False,
    with_function: bool = True,
    vocab_size: int = 16,
    num_labels: int = 3,
    hidden: int = 8,
    max_seq: int = 32,
    seed: int = 0,
    drop_metadata: Sequence[str] = (),
    vocab: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """A tiny padding-invariant model with the model-level interface and attndeploy metadata.

    `vocab`: record a word tokenizer with these words (`attndeploy.tokenizer`), as an export of
    a checkpoint with a vocabulary does; `package` then writes a text model too."""
    rng = np.random.default_rng(seed)
    weights = {
        "embedding": _dyadic(rng, (vocab_size, hidden)),  # [V, D]
        "classifier": _dyadic(rng, (hidden, num_labels)),  # [D, L]
        "bias": _dyadic(rng, (num_labels,)),  # [L]
        "gate_vector": _dyadic(rng, (hidden, 1)),  # [D, 1]
        "axis1": np.array([1], np.int64),
        "axis2": np.array([2], np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["embedding", "input_ids"], ["emb"]),  # [B, T, D]
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),  # [B, T]
    ]
    if head == "tagging":
        nodes += [
            helper.make_node("MatMul", ["emb", "classifier"], ["token_scores"]),  # [B, T, L]
            helper.make_node("Add", ["token_scores", "bias"], ["biased"]),  # [B, T, L]
            helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),  # [B, T, 1]
            helper.make_node("Mul", ["biased", "mask3"], ["logits"]),  # [B, T, L]
        ]
        logits_dims: list[int | str] = ["batch", "seq", num_labels]
    else:
        if custom_op:
            nodes.append(
                helper.make_node("MaskedSum", ["emb", "maskf"], ["total"], domain=CUSTOM_DOMAIN)
            )
        else:
            nodes += [
                helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),  # [B, T, 1]
                helper.make_node("Mul", ["emb", "mask3"], ["masked"]),  # [B, T, D]
                helper.make_node("ReduceSum", ["masked", "axis1"], ["total"], keepdims=0),
            ]
        nodes += [
            helper.make_node("ReduceSum", ["maskf", "axis1"], ["count"], keepdims=1),  # [B, 1]
            helper.make_node("MatMul", ["total", "classifier"], ["summed"]),  # [B, L], exact
            helper.make_node("Div", ["summed", "count"], ["mean"]),  # [B, L]
            helper.make_node("Add", ["mean", "bias"], ["logits"]),  # [B, L]
        ]
        logits_dims = ["batch", num_labels]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, logits_dims)]
    if gated:
        nodes += [
            helper.make_node("MatMul", ["emb", "gate_vector"], ["gate_col"]),  # [B, T, 1]
            helper.make_node("Squeeze", ["gate_col", "axis2"], ["gate_logits"]),  # [B, T]
            helper.make_node("Greater", ["gate_logits", "zero"], ["open"]),  # [B, T]
            helper.make_node("Cast", ["attention_mask"], ["real"], to=TensorProto.BOOL),
            helper.make_node("And", ["open", "real"], ["gates"]),  # [B, T]
        ]
        weights["zero"] = np.array(0.0, np.float32)
        outputs.append(helper.make_tensor_value_info("gates", TensorProto.BOOL, ["batch", "seq"]))
    used = {name for node in nodes for name in node.input}
    initializers = [numpy_helper.from_array(v, k) for k, v in weights.items() if k in used]
    graph = helper.make_graph(
        nodes,
        "attndeploy_fixture",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        outputs,
        initializer=initializers,
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if custom_op:
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    functions = [_masked_sum_function()] if custom_op and with_function else []
    model = helper.make_model(
        graph, opset_imports=opsets, functions=functions, producer_name="attndeploy-tests"
    )
    model.ir_version = 9
    variant = "ganet" if gated else ("qvi" if custom_op else "standard")
    config = {
        "variant": variant,
        "family": "transformer",
        "head": head,
        "num_labels": num_labels,
        "max_seq": max_seq,
        "vocab_size": vocab_size,
        "d_model": hidden,
    }
    digest = hashlib.sha256(b"".join(i.raw_data for i in initializers)).hexdigest()
    metadata = {
        "attndeploy.variant": variant,
        "attndeploy.version": VERSION,
        "attndeploy.config": json.dumps(config),
        "attndeploy.weights_sha256": digest,
        "attndeploy.labels": json.dumps([f"label_{i}" for i in range(num_labels)]),
        "attndeploy.opset": "1",
    }
    if vocab is not None:
        metadata["attndeploy.tokenizer"] = json.dumps({"type": "word", "vocab": list(vocab)})
    helper.set_model_props(model, {k: v for k, v in metadata.items() if k not in drop_metadata})
    return model


def fixture_vocab(vocab_size: int = 16) -> list[str]:
    """A word vocabulary of `vocab_size` entries: `<pad>`, `<unk>`, then w2, w3, ..."""
    return ["<pad>", "<unk>", *(f"w{i}" for i in range(2, vocab_size))]


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    """Write `model` to `path` (parents created) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def random_request(
    rng: np.random.Generator, batch: int, seq: int, vocab_size: int = 16, *, pad: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) int64 `[batch, seq]`, right-padded rows of >= 1 real token."""
    ids = rng.integers(0, vocab_size, size=(batch, seq), dtype=np.int64)
    lengths = rng.integers(1, seq + 1, size=batch) if pad else np.full(batch, seq)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return ids, mask
