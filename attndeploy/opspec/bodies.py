"""Helpers shared by the op bodies: masked softmax, hard gates, pad zeroing, scaled scores.

Letters: b batch, h heads, i query position, j key position, d head features.
These onnxscript functions live in the private domain `attndeploy.internal`. They are not ops of
the contract: `OpSpec.function_proto` (`attndeploy.opspec.spec`) inlines them into every op's
FunctionProto, so a shipped body uses standard ONNX ops only. Bodies are written against opset
18 (the oldest opset they support: `ReduceMax` takes its axes as an input from 18 on);
`function_proto` re-stamps the default-domain version to the model's opset.

Every body is polymorphic in `T` (float, float16, bfloat16): float constants enter through
`CastLike`; softmax and the gate decisions run in fp32 (`functional.masked_softmax` does the
same), so the mask constant is the most negative finite fp32 value and fp16 cannot overflow.

Control flow (the unpadded fast paths) follows one rule: a node's subgraphs read only values
that the node itself depends on through its explicit inputs, because tools that rewrite the
inlined graph follow explicit inputs only. onnxruntime's transformer optimizer (what Optimum's
ORTOptimizer runs) sorts nodes by `node.input` alone (onnxruntime/python/tools/transformers/
onnx_model.py, `graph_topological_sort`; "TODO: support graph_topological_sort() in subgraphs")
and moved an `If` whose condition read only the mask above the producer of the scores its
branches read: an invalid model. And onnxruntime's CPU provider, casting a float16 value to
float32 inside a branch, names that Cast after the outer value, the same name as its Cast of the
value in the main graph: one name defined twice, which the optimizer then rewires wrongly. So
`ZeroPads` (float16 in float16 models) is a `Loop` of 0 or 1 trips whose body gets the tensor
and the mask as loop-carried inputs, and `MaskedSoftmax`'s `If` has a condition that depends on
the float32 scores its branches read. tests/interop checks both tools on every variant.
"""

from __future__ import annotations

from typing import TypeVar, Union

import onnxscript
from onnxscript import BFLOAT16, BOOL, FLOAT, FLOAT16, INT64
from onnxscript import opset18 as op

from attndeploy.runtime.names import DOMAIN

# The element types every op accepts for its float tensors (docs/ops.md: `T`). onnxscript reads
# `typing.Union` but not `X | Y` (types.UnionType) in a TypeVar bound: keep the old spelling.
TFloat = TypeVar("TFloat", bound=Union[FLOAT, FLOAT16, BFLOAT16])  # noqa: UP007

# The domain and version of the contract (docs/ops.md), and the private domain of the helpers.
DOMAIN_VERSION = 1
ATTNDEPLOY = onnxscript.values.Opset(DOMAIN, DOMAIN_VERSION)
INTERNAL = onnxscript.values.Opset("attndeploy.internal", 1)

# The default-domain opset the bodies are written against (`op` above).
BODY_OPSET = 18

# torch.finfo(torch.float32).min: the additive mask value of the fp32 softmax.
FP32_MOST_NEGATIVE = -3.4028234663852886e38


@onnxscript.script(INTERNAL, default_opset=op)
def MaskedSoftmax(scores: TFloat, allowed: BOOL) -> TFloat:
    """MaskedSoftmax(scores: T, allowed: bool) -> T

    softmax_{last axis}(float32(scores) + M) cast back to T, M = 0 where `allowed` (broadcast
    against `scores`), the most negative finite fp32 value elsewhere (never -inf): a row with no
    allowed entry is uniform, not NaN. Equals `functional.masked_softmax`. When everything is
    allowed M is 0 and x + 0 = x, so the Add (a full pass over the scores) is skipped.

    The If's condition also reads the size of `scores32` (always >= 0, no data read): the
    branches read `scores32`, and a tool that orders nodes by their explicit inputs must not
    move the If above it (module docstring).
    """
    scores32 = op.Cast(scores, to=FLOAT.dtype)
    all_allowed = op.Equal(
        op.ReduceMin(op.Cast(allowed, to=INT64.dtype), keepdims=0), op.Constant(value_int=1)
    )  # scalar
    after_scores = op.GreaterOrEqual(op.Size(scores32), op.Constant(value_int=0))  # true
    unmasked = op.And(all_allowed, after_scores)  # scalar
    if unmasked:
        probs32 = op.Softmax(scores32, axis=-1)
    else:
        zero = op.Constant(value_float=0.0)
        most_negative = op.Constant(value_float=FP32_MOST_NEGATIVE)
        additive_mask = op.Where(allowed, zero, most_negative)  # shape of `allowed`
        probs32 = op.Softmax(op.Add(scores32, additive_mask), axis=-1)
    probs = op.CastLike(probs32, scores)
    return probs


@onnxscript.script(INTERNAL, default_opset=op)
def ScaledScores(query: TFloat, key: TFloat, scale: float) -> TFloat:
    """ScaledScores(query: T [B,H,Tq,d], key: T [B,H,Tk,d]; scale) -> T [B,H,Tq,Tk]

    S = scale · Q Kᵀ (the scale is an attribute, so onnxruntime folds it into FusedMatMul).
    """
    key_t = op.Transpose(key, perm=[0, 1, 3, 2])  # [B, H, d, Tk]
    scores = op.Mul(op.CastLike(scale, query), op.MatMul(query, key_t))  # [B, H, Tq, Tk]
    return scores


@onnxscript.script(INTERNAL, default_opset=op)
def ZeroPads(x: TFloat, key_padding_mask: BOOL) -> TFloat:
    """ZeroPads(x: T [B,H,T,T], key_padding_mask: bool [B,T]) -> T [B,H,T,T]

    Z(X): rows of padded queries and columns of padded keys set to 0, with Where (never by
    multiplying, so nothing non-finite can leak). A batch without padding returns X as is: Z is
    then the identity, and onnxruntime's CPU Where costs about four Adds and runs on one thread
    (0.8-0.9 ms vs 0.2 ms for an Add on [8, 4, 128, 128]), so the check (a reduction over
    [B, T]) pays for itself on every unpadded batch, e.g. every batch-1 request.

    The Where runs in a Loop of one trip when the batch has padding, none otherwise (a Loop
    with no trip returns its inputs). Not an If: an If's branches would read X from the outer
    scope, and the Loop body gets X and the mask as loop-carried inputs (module docstring). It
    costs what the If did (measured: the untaken Where is one copy of X in either).
    """
    padded = op.Less(
        op.ReduceMin(op.Cast(key_padding_mask, to=INT64.dtype), keepdims=0),
        op.Constant(value_int=1),
    )  # scalar; an empty batch counts as unpadded (ReduceMin's identity is the largest int)

    @onnxscript.graph()
    def zero_the_pads(trip: INT64, go_on: BOOL, x_in: TFloat, mask: BOOL[...]):
        rows = op.Unsqueeze(mask, [1, 3])  # [B, 1, T, 1]
        cols = op.Unsqueeze(mask, [1, 2])  # [B, 1, 1, T]
        x_out = op.Where(op.And(rows, cols), x_in, op.CastLike(0.0, x_in))  # [B, H, T, T]
        return op.Identity(go_on), x_out, op.Identity(mask)

    # Both the trip count and the condition are given: onnxruntime's symbolic shape inference
    # (used by its transformer optimizer) reads both, and onnx.reference runs no trip without a
    # condition.
    zeroed, _mask = op.Loop(
        op.Cast(padded, to=INT64.dtype), padded, x, key_padding_mask, body=zero_the_pads
    )
    return zeroed


@onnxscript.script(INTERNAL, default_opset=op)
def HardGates(gate_logits: TFloat, key_padding_mask: BOOL) -> BOOL:
    """HardGates(gate_logits: T [B,T], key_padding_mask: bool [B,T]) -> bool [B,T]

    open    = (logit > 0) AND real                      decided on the LOGIT, never on sigmoid
    rescue  = in a row with no open key, open the real key with the largest logit (ArgMax with
              select_last_index=0: ties -> smallest index); a row with no real key opens 0
    Decided in fp32 (exact for fp16/bf16 logits). Equals `functional.hard_gates`.
    """
    logits32 = op.Cast(gate_logits, to=FLOAT.dtype)  # [B, T]
    is_open = op.And(op.Greater(logits32, op.Constant(value_float=0.0)), key_padding_mask)
    candidates = op.Where(
        key_padding_mask, logits32, op.Constant(value_float=FP32_MOST_NEGATIVE)
    )  # [B, T]
    rescue_at = op.ArgMax(candidates, axis=1, keepdims=1, select_last_index=0)  # [B, 1]
    zero = op.Constant(value_int=0)
    any_real = op.Greater(
        op.ReduceMax(op.Cast(key_padding_mask, to=INT64.dtype), [1], keepdims=1), zero
    )  # [B, 1]
    rescue_at = op.Where(any_real, rescue_at, zero)  # [B, 1]
    any_open = op.Greater(op.ReduceMax(op.Cast(is_open, to=INT64.dtype), [1], keepdims=1), zero)
    num_keys = op.Squeeze(op.Shape(gate_logits, start=1, end=2), [0])  # scalar T
    positions = op.Range(zero, num_keys, op.Constant(value_int=1))  # [T]
    is_rescue_position = op.Equal(op.Unsqueeze(positions, [0]), rescue_at)  # [1, T] vs [B, 1]
    rescued = op.And(is_rescue_position, op.Not(any_open))  # [B, T]
    gates = op.Or(is_open, rescued)  # [B, T]
    return gates


@onnxscript.script(INTERNAL, default_opset=op)
def CausalAllowed(query: TFloat, key_padding_mask: BOOL) -> BOOL:
    """CausalAllowed(query: T [B,H,Tq,d], key_padding_mask: bool [B,Tk]) -> bool [B,1,Tq,Tk]

    The causal rule of the decoder ops (docs/variants.md §5): the queries are the last Tq of the
    Tk keys; query i reads key j when j <= i and j is real, and always its own key (j = i), so
    no row is empty. Equals `_causal.causal_allowed`.
    """
    zero = op.Constant(value_int=0)
    one = op.Constant(value_int=1)
    num_queries = op.Squeeze(op.Shape(query, start=2, end=3), [0])  # scalar Tq
    num_keys = op.Squeeze(op.Shape(key_padding_mask, start=1, end=2), [0])  # scalar Tk
    rows = op.Add(op.Range(zero, num_queries, one), op.Sub(num_keys, num_queries))  # [Tq]
    rows = op.Unsqueeze(rows, [1])  # [Tq, 1]: each query's position among the keys
    cols = op.Unsqueeze(op.Range(zero, num_keys, one), [0])  # [1, Tk]
    before = op.Unsqueeze(op.LessOrEqual(cols, rows), [0, 1])  # [1, 1, Tq, Tk]
    diagonal = op.Unsqueeze(op.Equal(cols, rows), [0, 1])  # [1, 1, Tq, Tk]
    real = op.Unsqueeze(key_padding_mask, [1, 2])  # [B, 1, 1, Tk]
    allowed = op.Or(op.And(before, real), diagonal)  # [B, 1, Tq, Tk]
    return allowed


@onnxscript.script(INTERNAL, default_opset=op)
def ZeroCausal(x: TFloat, key_padding_mask: BOOL) -> TFloat:
    """ZeroCausal(x: T [B,H,Tq,Tk], key_padding_mask: bool [B,Tk]) -> T [B,H,Tq,Tk]

    Z_c(X): rows of padded queries (the last Tq keys), columns of padded keys and every key after
    its query (j > i) set to 0, with Where. Equals `evolving.reference._zero_causal`.
    """
    zero = op.Constant(value_int=0)
    one = op.Constant(value_int=1)
    num_queries = op.Shape(x, start=2, end=3)  # [1]: Tq
    num_keys = op.Shape(x, start=3, end=4)  # [1]: Tk
    first_query = op.Sub(num_keys, num_queries)  # [1]: P
    rows = op.Add(op.Range(zero, op.Squeeze(num_queries, [0]), one), first_query)  # [Tq]
    cols = op.Range(zero, op.Squeeze(num_keys, [0]), one)  # [Tk]
    before = op.LessOrEqual(op.Unsqueeze(cols, [0]), op.Unsqueeze(rows, [1]))  # [Tq, Tk]
    query_real = op.Slice(key_padding_mask, first_query, num_keys, [1])  # [B, Tq]
    keep = op.And(
        op.And(op.Unsqueeze(before, [0, 1]), op.Unsqueeze(query_real, [1, 3])),
        op.Unsqueeze(key_padding_mask, [1, 2]),
    )  # [B, 1, Tq, Tk]
    zeroed = op.Where(keep, x, op.CastLike(0.0, x))  # [B, H, Tq, Tk]
    return zeroed


# The helper functions the registry inlines into the op bodies.
HELPERS = (MaskedSoftmax, ScaledScores, ZeroPads, HardGates, CausalAllowed, ZeroCausal)
