"""QVI invariants Q1–Q5 (docs/variants.md §2, §6), against the tests' own per-example references."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attndeploy.config import QVIConfig
from attndeploy.models import build_model
from attndeploy.variants import functional as Fn
from attndeploy.variants.qvi.layer import QVIAttention
from tests.cases import CASES_BY_ID
from tests.helpers import (
    assert_close,
    assert_close_valid,
    lengths_mask,
    qkv,
    qvi_weights,
    randn,
    token_batch,
    vanilla_attention,
)

pytestmark = pytest.mark.usefixtures("torch_defaults")

LENGTHS = [7, 4, 1]
WIDTH = 7


def _lin(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """One head's affine map, x [n, d] @ w [d, e] + b [e]."""
    return x @ w if b is None else x @ w + b


def reference_pooled(q, k, v, lengths, u_w, u_b, w_w, w_b, g_v, g_q, g_b, p_w) -> Tensor:
    """docs/variants.md §2.3 one example and one head at a time, on the real positions only."""
    out = torch.zeros_like(q)
    scale = q.shape[-1] ** -0.5
    for b, n in enumerate(lengths):
        for h in range(q.shape[1]):
            qs, ks, vs = q[b, h, :n], k[b, h, :n], v[b, h, :n]  # [n, d]
            beta = torch.softmax(scale * (qs @ p_w[h]), dim=0)  # [n], over real queries only
            q_bar = beta @ qs  # [d]
            v_hat = _lin(q_bar, u_w[h], u_b[h])[None, :] * _lin(vs, w_w[h], w_b[h])  # [n, d]
            gamma = torch.sigmoid(_lin(vs, g_v[h]) + _lin(v_hat, g_q[h]) + g_b[h])
            v_tilde = gamma * vs + (1 - gamma) * v_hat
            out[b, h, :n] = torch.softmax(scale * qs @ ks.T, dim=-1) @ v_tilde
    return out


def reference_pairwise(q, k, v, lengths, u_w, u_b, w_w, w_b, g_v, g_q, g_b) -> Tensor:
    """docs/variants.md §2.4 with explicit loops over query i and key j (real positions only)."""
    out = torch.zeros_like(q)
    scale = q.shape[-1] ** -0.5
    for b, n in enumerate(lengths):
        for h in range(q.shape[1]):
            qs, ks, vs = q[b, h, :n], k[b, h, :n], v[b, h, :n]
            probs = torch.softmax(scale * qs @ ks.T, dim=-1)  # [n, n]
            for i in range(n):
                u = _lin(qs[i], u_w[h], u_b[h])
                acc = torch.zeros(q.shape[-1])
                for j in range(n):
                    v_hat = u * _lin(vs[j], w_w[h], w_b[h])
                    gamma = torch.sigmoid(_lin(vs[j], g_v[h]) + _lin(v_hat, g_q[h]) + g_b[h])
                    acc = acc + probs[i, j] * (gamma * vs[j] + (1 - gamma) * v_hat)
                out[b, h, i] = acc
    return out


@pytest.fixture
def inputs():
    q, k, v = qkv(len(LENGTHS), 2, WIDTH, 4, seed=21)
    return q, k, v, lengths_mask(LENGTHS, WIDTH)


def test_pooled_form_matches_the_per_example_reference(inputs):
    q, k, v, mask = inputs
    weights = qvi_weights(2, 4)
    expected = reference_pooled(q, k, v, LENGTHS, *weights)
    assert_close_valid(Fn.qvi_attention(q, k, v, mask, *weights), expected, mask)


def test_pairwise_form_matches_the_explicit_double_loop(inputs):
    q, k, v, mask = inputs
    weights = qvi_weights(2, 4, pooled=False)
    expected = reference_pairwise(q, k, v, LENGTHS, *weights)
    assert_close_valid(Fn.qvi_pairwise_attention(q, k, v, mask, *weights), expected, mask)


# ----------------------------------------------------------------------------- Q1


def _gates_forced_open(heads: int, d: int, pooled: bool) -> list[Tensor]:
    weights = qvi_weights(heads, d, pooled=pooled)
    weights[4] = torch.zeros(heads, d, d)  # gate_value_weight
    weights[5] = torch.zeros(heads, d, d)  # gate_interaction_weight
    weights[6] = torch.full((heads, d), 50.0)  # gate_bias: sigmoid(50) == 1.0 in fp32
    return weights


def test_gamma_forced_to_one_gives_vanilla_attention_in_pooled_form(inputs):
    q, k, v, mask = inputs
    out = Fn.qvi_attention(q, k, v, mask, *_gates_forced_open(2, 4, pooled=True))
    assert_close_valid(out, vanilla_attention(q, k, v, mask), mask)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_gamma_forced_to_one_gives_vanilla_attention_in_pairwise_form(inputs, chunk_size):
    q, k, v, mask = inputs
    weights = _gates_forced_open(2, 4, pooled=False)
    out = Fn.qvi_pairwise_attention(q, k, v, mask, *weights, chunk_size=chunk_size)
    assert_close_valid(out, vanilla_attention(q, k, v, mask), mask)


@pytest.mark.parametrize("form", ["pooled", "pairwise"])
def test_qvi_model_with_gamma_forced_to_one_equals_the_standard_model(form):
    config = CASES_BY_ID[f"qvi_{form}"].config()
    qvi_model = build_model(config).eval()
    with torch.no_grad():
        for module in qvi_model.modules():
            if isinstance(module, QVIAttention):
                module.gate_v_weight.zero_()
                module.gate_qv_weight.zero_()
                module.gate_bias.fill_(50.0)
    standard = build_model(config.replace(variant="standard")).eval()
    missing, unexpected = standard.load_state_dict(qvi_model.state_dict(), strict=False)
    assert not missing and all(".attention." in name for name in unexpected)
    ids, am = token_batch([9, 4, 1], 9)
    assert_close(qvi_model(ids, am)["logits"], standard(ids, am)["logits"])


# ----------------------------------------------------------------------------- Q2


def test_pooled_equals_pairwise_when_all_real_queries_are_the_same_vector(inputs):
    q, k, v, mask = inputs
    shared = randn(3, 2, 1, 4, seed=30)  # one vector per example and head
    same = torch.where(mask[:, None, :, None], shared, q)  # pads keep arbitrary queries
    weights = qvi_weights(2, 4)
    pooled = Fn.qvi_attention(same, k, v, mask, *weights)
    pairwise = Fn.qvi_pairwise_attention(same, k, v, mask, *weights[:-1])
    assert_close_valid(pooled, pairwise, mask)


# ----------------------------------------------------------------------------- Q3


@pytest.mark.parametrize("chunk_size", [1, 3, 5, 7, 100], ids=lambda c: f"chunk{c}")
def test_pairwise_chunked_equals_unchunked_forward_and_backward(chunk_size):
    q, k, v = (x.requires_grad_() for x in qkv(3, 2, 7, 4, seed=23))
    mask = lengths_mask(LENGTHS, WIDTH)
    weights = [w.requires_grad_() for w in qvi_weights(2, 4, pooled=False)]
    leaves = [q, k, v, *weights]
    cotangent = randn(3, 2, 7, 4, seed=24) * mask[:, None, :, None]  # real queries only

    def run(chunk):
        out = Fn.qvi_pairwise_attention(q, k, v, mask, *weights, chunk_size=chunk)
        grads = torch.autograd.grad((out * cotangent).sum(), leaves)
        return out.detach(), grads

    out_ref, grads_ref = run(None)
    out, grads = run(chunk_size)
    assert_close_valid(out, out_ref, mask)
    for grad, grad_ref in zip(grads, grads_ref, strict=True):
        assert_close(grad, grad_ref)


def test_pairwise_model_output_does_not_depend_on_the_chunk_size():
    config = CASES_BY_ID["qvi_pairwise"].config()
    chunked = build_model(config).eval()
    whole = build_model(config.replace(qvi=QVIConfig(form="pairwise", pairwise_chunk=64))).eval()
    whole.load_state_dict(chunked.state_dict())
    ids, am = token_batch([11, 5], 11)
    assert_close(chunked(ids, am)["logits"], whole(ids, am)["logits"])


# ----------------------------------------------------------------------------- Q4


def observed_q_bar(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, pool_weight: Tensor) -> Tensor:
    """Read the pooled query q_bar [B, H, d] off the op's output.

    With W_u = I, b_u = 0, W_w = 0, b_w = 1 the query-aware values are V-hat = q_bar at every
    position; zero gate weights and gate_bias = -50 give Gamma = 0, so V-tilde = q_bar and the
    attention (weights summing to 1) returns q_bar at every real query.
    """
    heads, d = q.shape[1], q.shape[-1]
    eye = torch.eye(d).expand(heads, d, d)
    zeros, zero_bias = torch.zeros(heads, d, d), torch.zeros(heads, d)
    out = Fn.qvi_attention(
        q, k, v, mask, eye, zero_bias, zeros, torch.ones(heads, d), zeros, zeros,
        torch.full((heads, d), -50.0), pool_weight,
    )  # [B, H, T, d], equal to q_bar at every real position
    first = out[:, :, 0]
    assert_close_valid(out, first[:, :, None, :].expand_as(out).contiguous(), mask)
    return first


def test_zero_pool_weight_pools_the_uniform_mean_of_real_queries(inputs):
    q, k, v, mask = inputs
    q_bar = observed_q_bar(q, k, v, mask, torch.zeros(2, 4))
    real = mask[:, None, :, None].to(q.dtype)
    mean = (q * real).sum(2) / real.sum(2)  # [B, H, d]
    assert_close(q_bar, mean)


def test_beta_is_a_softmax_over_real_queries_only(inputs):
    """beta = softmax_i(scale * q_i . w_p) over the real queries: 0 at pads, sums to 1."""
    q, k, v, mask = inputs
    pool_weight = 2.0 * randn(2, 4, seed=41)
    q_bar = observed_q_bar(q, k, v, mask, pool_weight)
    for b, n in enumerate(LENGTHS):
        for h in range(2):
            scores = [float(q[b, h, i] @ pool_weight[h]) / 2.0 for i in range(n)]  # scale 1/sqrt(4)
            weights = torch.softmax(torch.tensor(scores), dim=0)
            assert abs(float(weights.sum()) - 1.0) < 1e-6
            assert_close(q_bar[b, h], weights @ q[b, h, :n])


def test_beta_is_zero_at_padded_queries(inputs):
    """Padded queries, however large, never enter q_bar or the real outputs."""
    q, k, v, mask = inputs
    pool_weight = 2.0 * randn(2, 4, seed=42)
    moved = torch.where(mask[:, None, :, None], q, torch.full_like(q, 100.0))
    assert_close(observed_q_bar(moved, k, v, mask, pool_weight),
                 observed_q_bar(q, k, v, mask, pool_weight))
    weights = qvi_weights(2, 4)
    assert_close_valid(
        Fn.qvi_attention(moved, k, v, mask, *weights), Fn.qvi_attention(q, k, v, mask, *weights),
        mask,
    )


# ----------------------------------------------------------------------------- Q5


@pytest.mark.parametrize("form, per_head", [("pooled", "4d2+4d"), ("pairwise", "4d2+3d")])
def test_qvi_layer_adds_the_documented_parameter_count(form, per_head):
    config = CASES_BY_ID[f"qvi_{form}"].config()
    layer = QVIAttention.from_config(config, 0)
    h, d = config.n_heads, config.head_dim
    extra = sum(p.numel() for name, p in layer.named_parameters()
                if not name.startswith(("qkv.", "out.")))
    expected = h * (4 * d * d + 4 * d) if form == "pooled" else h * (4 * d * d + 3 * d)
    assert extra == expected
    assert hasattr(layer, "pool_weight") == (form == "pooled")


def test_bert_base_counts_match_the_design_table():
    h, d = 12, 64
    assert h * (4 * d * d + 4 * d) == 199_680
    assert h * (4 * d * d + 3 * d) == 198_912


@pytest.mark.parametrize("form", ["pooled", "pairwise"])
def test_every_qvi_parameter_gets_a_nonzero_gradient(form):
    config = CASES_BY_ID[f"qvi_{form}"].config()
    layer = QVIAttention.from_config(config, 0)
    mask = lengths_mask([6, 3], 6)
    x = randn(2, 6, config.d_model, seed=50)
    out = layer(x, mask)  # [B, T, D]
    (out * randn(*out.shape, seed=51))[mask].sum().backward()
    qvi_params = {name: p for name, p in layer.named_parameters()
                  if not name.startswith(("qkv.", "out."))}
    assert qvi_params, "no QVI parameters found"
    for name, p in qvi_params.items():
        assert p.grad is not None and p.grad.abs().max() > 0, name
