"""Contracts shared by every op of `attndeploy.variants.functional` (docs/variants.md §6 C1, C2,
C6).

Each op runs on random tensors through a small adapter (`OPS`) that supplies its weights, so one
parametrised test checks shapes, finiteness and the no-NaN rule for all of them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from attndeploy.variants import functional as Fn
from tests.helpers import (
    assert_close,
    lengths_mask,
    qkv,
    qvi_weights,
    randn,
    vanilla_attention,
)

pytestmark = pytest.mark.usefixtures("torch_defaults")


def _conv(heads: int, seed: int = 7) -> tuple[Tensor, Tensor]:
    return 0.3 * randn(heads, heads, 3, 3, seed=seed), 0.1 * randn(heads, seed=seed + 1)


# Each adapter: (q, k, v, mask) -> the op's [B, H, T, d] output (plus any other outputs).
OpAdapter = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, ...]]


def _qvi(q, k, v, m):
    return (Fn.qvi_attention(q, k, v, m, *qvi_weights(q.shape[1], q.shape[-1])),)


def _qvi_pairwise(q, k, v, m):
    weights = qvi_weights(q.shape[1], q.shape[-1], pooled=False)
    return (Fn.qvi_pairwise_attention(q, k, v, m, *weights, chunk_size=2),)


def _gate_logits(m: Tensor) -> Tensor:
    return randn(*m.shape, seed=11)


def _gated(q, k, v, m):
    return Fn.gated_attention(q, k, v, m, _gate_logits(m))


def _gated_gather(q, k, v, m):
    return Fn.gated_attention(q, k, v, m, _gate_logits(m), gather_open_keys=True)


def _budget(q, k, v, m):
    return Fn.budget_gated_attention(q, k, v, m, _gate_logits(m), budget=0.5)


def _pooling(q, k, v, m):
    values = v.transpose(1, 2).flatten(2)  # [B, T, H*d]
    context, gates = Fn.gated_attention_pooling(values, randn(*m.shape, seed=3), m, _gate_logits(m))
    return context, gates


def _evolving_start(q, k, v, m):
    return Fn.evolving_attention_start(q, k, v, m)


def _evolving(q, k, v, m):
    _, prev = Fn.evolving_attention_start(k, q, v, m)
    return Fn.evolving_attention(q, k, v, m, prev, *_conv(q.shape[1]), alpha=0.5, beta=1.0)


# The causal ops, over a whole sequence (P = 0: the queries are all the keys).
def _qvi_prefix(q, k, v, m):
    from attndeploy.variants.qvi.reference import empty_prefix_state

    weights = qvi_weights(q.shape[1], q.shape[-1])  # pool_weight last, as the op takes it
    past_values, *sums = empty_prefix_state(q)
    output, *_ = Fn.qvi_prefix_attention(q, k, v, m, past_values, *sums, *weights)
    return (output,)


def _qvi_causal_pairwise(q, k, v, m):
    weights = qvi_weights(q.shape[1], q.shape[-1], pooled=False)
    return (Fn.qvi_causal_pairwise_attention(q, k, v, m, *weights, chunk_size=2),)


def _causal_gated(q, k, v, m):
    return Fn.causal_gated_attention(q, k, v, m, _gate_logits(m))


def _causal_evolving_start(q, k, v, m):
    return Fn.causal_evolving_attention_start(q, k, v, m)


def _causal_evolving(q, k, v, m):
    _, prev = Fn.causal_evolving_attention_start(k, q, v, m)
    rows = q.new_zeros(q.shape[0], q.shape[1], 2, k.shape[2])  # [B, H, 2, T]: no past
    return Fn.causal_evolving_attention(q, k, v, m, prev, rows, *_conv(q.shape[1]),
                                        alpha=0.5, beta=1.0)


OPS: dict[str, OpAdapter] = {
    "qvi_attention": _qvi,
    "qvi_pairwise_attention": _qvi_pairwise,
    "gated_attention": _gated,
    "gated_attention[gather]": _gated_gather,
    "gated_attention_pooling": _pooling,
    "budget_gated_attention": _budget,
    "evolving_attention_start": _evolving_start,
    "evolving_attention": _evolving,
    "qvi_prefix_attention": _qvi_prefix,
    "qvi_causal_pairwise_attention": _qvi_causal_pairwise,
    "causal_gated_attention": _causal_gated,
    "causal_evolving_attention_start": _causal_evolving_start,
    "causal_evolving_attention": _causal_evolving,
}


def _expected_main_shape(name: str, q: Tensor) -> tuple[int, ...]:
    batch, heads, t, d = q.shape
    if name == "gated_attention_pooling":
        return (batch, heads * d)
    return (batch, heads, t, d)


def test_every_op_of_the_set_has_an_adapter():
    from attndeploy.variants.op_registry import op_specs

    op_names = {spec.functional_name for spec in op_specs()}
    covered = {name.split("[")[0] for name in OPS}
    assert covered == op_names
    assert op_names <= set(Fn.__all__)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize(
    "lengths, width",
    [([1], 1), ([1, 1], 1), ([7, 7], 7), ([7, 3, 1], 7), ([5, 2], 9)],
    ids=["T1", "T1-batch2", "odd-T", "mixed-lengths", "all-padded-tail"],
)
def test_op_output_shapes_are_b_h_t_d_for_t1_odd_and_mixed_lengths(name, lengths, width):
    q, k, v = qkv(len(lengths), 2, width, 4)
    mask = lengths_mask(lengths, width)
    outputs = OPS[name](q, k, v, mask)
    assert tuple(outputs[0].shape) == _expected_main_shape(name, q)
    for out in outputs:
        if out.dtype.is_floating_point:
            assert torch.isfinite(out).all()
    if name.startswith("evolving"):
        assert tuple(outputs[1].shape) == (len(lengths), 2, width, width)
    if name.startswith("gated"):
        assert outputs[1].dtype == torch.bool and tuple(outputs[1].shape) == (len(lengths), width)


@pytest.mark.parametrize("name", OPS)
def test_op_is_finite_on_rows_without_any_real_key(name):
    """C2/C6 at op level: an example with zero valid tokens never produces NaN or inf."""
    q, k, v = qkv(3, 2, 5, 4, seed=4)
    mask = lengths_mask([5, 0, 1], 5)
    outputs = OPS[name](q, k, v, mask)
    for out in outputs:
        if out.dtype.is_floating_point:
            assert torch.isfinite(out).all(), name


@pytest.mark.parametrize("name", OPS)
def test_op_ignores_garbage_in_padded_keys_and_queries(name):
    """Huge or non-finite values at padded positions stay out of the real outputs."""
    q, k, v = qkv(2, 2, 6, 4, seed=5)
    mask = lengths_mask([6, 3], 6)
    clean = OPS[name](q, k, v, mask)
    dirty = [x.clone() for x in (q, k, v)]
    for x in dirty:
        x[1, :, 3:] = 1e4
    noisy = OPS[name](*dirty, mask)
    if name == "gated_attention_pooling":
        assert_close(noisy[0], clean[0])
    else:
        for b, n in enumerate([6, 3]):
            assert_close(noisy[0][b, :, :n], clean[0][b, :, :n])
    if name.startswith("evolving"):  # the handed-on logits too, on the real block
        assert_close(noisy[1][1, :, :3, :3], clean[1][1, :, :3, :3])


def test_masked_softmax_adds_a_finite_mask_and_runs_in_fp32():
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], dtype=torch.float16)
    allowed = torch.tensor([[True, False, True], [False, False, False]])
    probs = Fn.masked_softmax(scores, allowed)
    assert probs.dtype == torch.float16
    assert torch.isfinite(probs).all()
    assert probs[0, 1] == 0
    expected = torch.softmax(torch.tensor([1.0, 3.0]), -1)
    assert_close(probs[0, [0, 2]].float(), expected, (1e-3, 1e-3))
    assert_close(probs[1].float(), torch.full((3,), 1 / 3), (1e-3, 1e-3))  # no real key: uniform


def test_additive_mask_is_zero_or_the_most_negative_finite_value():
    mask = Fn.additive_mask(torch.tensor([True, False]), torch.float32)
    assert mask.tolist() == [0.0, torch.finfo(torch.float32).min]
    assert torch.isfinite(mask).all()


def test_head_linear_is_x_at_w_per_head_plus_bias():
    x, w, b = randn(2, 3, 4, 5, seed=1), randn(3, 5, 6, seed=2), randn(3, 6, seed=3)
    expected = torch.stack([x[:, h] @ w[h] + b[h] for h in range(3)], dim=1)
    assert_close(Fn.head_linear(x, w, b), expected)


def test_default_scale_is_one_over_sqrt_head_dim():
    q = torch.zeros(1, 1, 1, 16)
    assert Fn.resolve_scale(q, None) == 0.25
    assert Fn.resolve_scale(q, 0.5) == 0.5


@pytest.mark.parametrize("scale", [None, 0.3])
def test_evolving_start_and_all_open_gates_match_vanilla_with_explicit_scale(scale):
    q, k, v = qkv(2, 3, 5, 4, seed=9)
    mask = lengths_mask([5, 2], 5)
    expected = vanilla_attention(q, k, v, mask, scale)
    out, _ = Fn.evolving_attention_start(q, k, v, mask, scale=scale)
    gated, _ = Fn.gated_attention(q, k, v, mask, torch.full((2, 5), 3.0), scale=scale)
    for actual in (out, gated):
        for b, n in enumerate([5, 2]):
            assert_close(actual[b, :, :n], expected[b, :, :n])


def test_every_variant_keeps_its_op_references_in_its_own_package():
    """One convention: a variant's references live in `variants/<name>/reference.py`, beside its
    layer and ops; `functional` re-exports them as the stable functional API."""
    import importlib

    from attndeploy.variants.registry import variant_specs

    seen = []
    for spec in variant_specs():
        if spec.ops is None:
            continue
        for op in importlib.import_module(spec.ops).OPS:  # the causal ones included
            assert op.reference.__module__ == f"attndeploy.variants.{spec.name}.reference", op.name
            assert getattr(Fn, op.functional_name) is op.reference
            seen.append(op.functional_name)
    assert sorted(set(seen) | {"hard_gates", "masked_softmax"}) == sorted(Fn.__all__)
