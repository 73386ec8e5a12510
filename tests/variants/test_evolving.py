"""Evolving-attention invariants E1–E7 (docs/variants.md §4, §6).

The references here evaluate each example on its real block only (a T_b x T_b map with the conv's
own zero border), which is what the pad-zeroing rule Z must reproduce under right padding.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attndeploy.config import EvolvingConfig
from attndeploy.models import build_model
from attndeploy.variants import functional as Fn
from attndeploy.variants.api import LayerContext
from attndeploy.variants.evolving.layer import EvolvingAttention
from attndeploy.variants.standard.layer import StandardAttention
from tests.cases import CASES_BY_ID
from tests.helpers import (
    assert_close,
    assert_close_valid,
    lengths_mask,
    qkv,
    randn,
    token_batch,
    vanilla_attention,
)

pytestmark = pytest.mark.usefixtures("torch_defaults")

H, D = 2, 4


def conv_params(seed: int, heads: int = H) -> tuple[Tensor, Tensor]:
    return 0.3 * randn(heads, heads, 3, 3, seed=seed), 0.2 * randn(heads, seed=seed + 1)


def reference_layer(
    q: Tensor, k: Tensor, v: Tensor, n: int, prev: Tensor | None, conv: tuple[Tensor, Tensor]
    | None, alpha: float, beta: float, activation
) -> tuple[Tensor, Tensor]:
    """One example [H, T, d] on its first n positions: (output [H, n, d], logits [H, n, n])."""
    q, k, v = q[:, :n], k[:, :n], v[:, :n]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [H, n, n]
    if prev is None:
        logits = scores
    else:
        mixed = alpha * prev + (1 - alpha) * scores
        c = activation(F.conv2d(mixed[None], conv[0], conv[1], padding=1)[0])
        logits = beta * c + (1 - beta) * mixed
    return torch.softmax(logits, dim=-1) @ v, logits


def run_chain(layers, mask, alpha, beta, negative_slope=0.0):
    """Functional chain: layers = [(q, k, v, conv or None)]; returns [(output, logits)]."""
    results, prev = [], None
    for q, k, v, conv in layers:
        if prev is None:
            out, prev = Fn.evolving_attention_start(q, k, v, mask)
        else:
            out, prev = Fn.evolving_attention(q, k, v, mask, prev, *conv, alpha=alpha, beta=beta,
                                              negative_slope=negative_slope)
        results.append((out, prev))
    return results


def random_chain(n_layers: int, batch: int, width: int, seed: int = 0):
    layers = []
    for layer in range(n_layers):
        q, k, v = qkv(batch, H, width, D, seed=seed + 10 * layer)
        layers.append((q, k, v, None if layer == 0 else conv_params(seed + 10 * layer + 5)))
    return layers


LENGTHS = [6, 4, 1]


# ----------------------------------------------------------------------------- E1


def test_alpha_and_beta_zero_give_vanilla_attention_at_every_layer():
    mask = lengths_mask(LENGTHS, 6)
    layers = random_chain(4, 3, 6, seed=80)
    for (q, k, v, _), (out, _) in zip(layers, run_chain(layers, mask, 0.0, 0.0), strict=True):
        assert_close_valid(out, vanilla_attention(q, k, v, mask), mask)


def test_evolving_model_with_alpha_beta_zero_equals_the_standard_model():
    config = CASES_BY_ID["evolving"].config(evolving=EvolvingConfig(alpha=0.0, beta=0.0))
    evolving = build_model(config).eval()
    standard = build_model(config.replace(variant="standard")).eval()
    missing, unexpected = standard.load_state_dict(evolving.state_dict(), strict=False)
    assert not missing and all(".attention.conv." in name for name in unexpected)
    ids, am = token_batch([12, 7, 1], 12)
    assert_close(evolving(ids, am)["logits"], standard(ids, am)["logits"])


# ----------------------------------------------------------------------------- E2


@pytest.mark.parametrize("alpha, beta", [(0.5, 1.0), (0.3, 0.5), (1.0, 0.0)])
def test_first_layer_of_a_chain_is_vanilla_and_has_no_conv(alpha, beta):
    config = CASES_BY_ID["evolving"].config(evolving=EvolvingConfig(alpha=alpha, beta=beta))
    first = EvolvingAttention.from_config(config, 0)
    assert {name for name, _ in first.named_parameters()} == {
        "qkv.weight", "qkv.bias", "out.weight", "out.bias"
    }
    standard = StandardAttention.from_config(config, 0)
    standard.load_state_dict(first.state_dict())
    mask = lengths_mask([7, 3], 7)
    x = randn(2, 7, config.d_model, seed=81)
    ours = first.forward_context(x, LayerContext(key_padding_mask=mask))
    theirs = standard.forward_context(x, LayerContext(key_padding_mask=mask))
    assert_close(ours.output[mask], theirs.output[mask])
    assert ours.logits is not None and ours.logits.shape == (2, config.n_heads, 7, 7)


def test_later_layer_without_previous_logits_is_a_clear_error():
    from attndeploy.errors import ConfigError

    config = CASES_BY_ID["evolving"].config()
    with pytest.raises(ConfigError, match="previous layer's logits"):
        EvolvingAttention.from_config(config, 1).forward_context(
            randn(1, 3, config.d_model),
            LayerContext(key_padding_mask=torch.ones(1, 3, dtype=torch.bool)),
        )


# ----------------------------------------------------------------------------- E3


def test_beta_zero_makes_the_output_independent_of_the_conv_with_zero_gradient():
    mask = lengths_mask(LENGTHS, 6)
    q, k, v = qkv(3, H, 6, D, seed=82)
    _, prev = Fn.evolving_attention_start(*qkv(3, H, 6, D, seed=83), mask)
    weight, bias = (p.requires_grad_() for p in conv_params(84))
    out, logits = Fn.evolving_attention(q, k, v, mask, prev, weight, bias, alpha=0.4, beta=0.0)
    other, other_logits = Fn.evolving_attention(q, k, v, mask, prev, *conv_params(85), alpha=0.4,
                                                beta=0.0)
    assert torch.equal(out, other) and torch.equal(logits, other_logits)
    grad_w, grad_b = torch.autograd.grad((out * randn(*out.shape)).sum(), (weight, bias))
    assert not grad_w.any() and not grad_b.any()


# ----------------------------------------------------------------------------- E4


@pytest.mark.parametrize("alpha, beta, slope", [(0.5, 1.0, 0.0), (0.3, 0.5, 0.01)])
def test_padding_invariance_holds_through_a_four_layer_chain(alpha, beta, slope):
    width, padded = 5, 9
    short = random_chain(4, 1, width, seed=86)
    long = []
    for layer, (q, k, v, conv) in enumerate(short):
        garbage = qkv(1, H, padded - width, D, seed=200 + layer)
        grown = [torch.cat([x, 3.0 * g], dim=2) for x, g in zip((q, k, v), garbage, strict=True)]
        long.append((*grown, conv))
    ref = run_chain(short, lengths_mask([width], width), alpha, beta, slope)
    got = run_chain(long, lengths_mask([width], padded), alpha, beta, slope)
    for (out_ref, logits_ref), (out, logits) in zip(ref, got, strict=True):
        assert_close(out[:, :, :width], out_ref)
        assert_close(logits[:, :, :width, :width], logits_ref)


def test_chain_matches_the_per_example_real_block_reference():
    mask = lengths_mask(LENGTHS, 6)
    layers = random_chain(3, 3, 6, seed=87)
    results = run_chain(layers, mask, 0.3, 0.7)
    for b, n in enumerate(LENGTHS):
        prev = None
        for (q, k, v, conv), (out, logits) in zip(layers, results, strict=True):
            ref_out, prev = reference_layer(q[b], k[b], v[b], n, prev, conv, 0.3, 0.7, torch.relu)
            assert_close(out[b, :, :n], ref_out)
            assert_close(logits[b, :, :n, :n], prev)


# ----------------------------------------------------------------------------- E5


def test_handed_on_logits_are_exactly_zero_at_pad_rows_and_columns():
    mask = lengths_mask(LENGTHS, 6)
    for _, logits in run_chain(random_chain(3, 3, 6, seed=88), mask, 0.5, 1.0):
        pair = mask[:, None, :, None] & mask[:, None, None, :]  # [B, 1, T, T]
        pads = logits.masked_select(~pair.expand_as(logits))
        assert pads.numel() > 0 and torch.equal(pads, torch.zeros_like(pads))


def test_non_finite_values_at_pads_never_reach_the_conv():
    mask = lengths_mask(LENGTHS, 6)
    q, k, v = qkv(3, H, 6, D, seed=89)
    _, prev = Fn.evolving_attention_start(*qkv(3, H, 6, D, seed=90), mask)
    pair = (mask[:, None, :, None] & mask[:, None, None, :]).expand_as(prev)
    dirty_prev = prev.masked_fill(~pair, float("nan"))
    dirty_prev[1, :, 5, :] = float("inf")
    pads = ~mask[:, None, :, None].expand_as(q)
    big_q, big_k = q.masked_fill(pads, 1e20), k.masked_fill(pads, -1e20)  # QK^T overflows at pads
    conv = conv_params(91)
    clean = Fn.evolving_attention(q, k, v, mask, prev, *conv, alpha=0.5, beta=1.0)
    dirty = Fn.evolving_attention(big_q, big_k, v, mask, dirty_prev, *conv, alpha=0.5, beta=1.0)
    assert all(torch.isfinite(x).all() for x in dirty)
    assert_close_valid(dirty[0], clean[0], mask)
    assert torch.equal(dirty[1].masked_select(pair), clean[1].masked_select(pair))


# ----------------------------------------------------------------------------- E6


@pytest.mark.parametrize("slope", [0.0, 0.2])
def test_negative_slope_zero_is_relu_and_positive_is_leaky_relu(slope):
    mask = lengths_mask(LENGTHS, 6)
    q, k, v = qkv(3, H, 6, D, seed=92)
    prev_q, prev_k, prev_v = qkv(3, H, 6, D, seed=93)
    _, prev = Fn.evolving_attention_start(prev_q, prev_k, prev_v, mask)
    conv = conv_params(94)
    out, logits = Fn.evolving_attention(q, k, v, mask, prev, *conv, alpha=0.5, beta=0.8,
                                        negative_slope=slope)

    def activation(x):
        return torch.relu(x) if slope == 0 else torch.where(x > 0, x, slope * x)

    for b, n in enumerate(LENGTHS):
        _, ref_prev = reference_layer(prev_q[b], prev_k[b], prev_v[b], n, None, None, 0, 0, None)
        ref_out, ref_logits = reference_layer(q[b], k[b], v[b], n, ref_prev, conv, 0.5, 0.8,
                                              activation)
        assert_close(out[b, :, :n], ref_out)
        assert_close(logits[b, :, :n, :n], ref_logits)


def test_alpha_and_beta_are_fixed_hyperparameters_and_each_ea_layer_has_9h2_plus_h_params():
    config = CASES_BY_ID["evolving"].config()
    model = build_model(config)
    h = config.n_heads
    layers = [block.attention for block in model.blocks]
    assert isinstance(layers[0], EvolvingAttention) and not hasattr(layers[0], "conv")
    for layer in layers[1:]:
        assert sum(p.numel() for p in layer.conv.parameters()) == 9 * h * h + h
        assert isinstance(layer.alpha, float) and isinstance(layer.beta, float)
    names = [name for name, _ in model.named_parameters()]
    assert not any(name.split(".")[-1] in ("alpha", "beta") for name in names)
    assert 9 * 12 * 12 + 12 == 1308  # the design's BERT-base figure


# ----------------------------------------------------------------------------- E7


def _softmax_row(row: list[float]) -> list[float]:
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    return [e / sum(exps) for e in exps]


def _hand_layer(q, k, v, prev, weight, bias, alpha, beta, slope):
    """H = 1, d = 1 (scale 1): plain Python lists, §4.2 evaluated term by term."""
    n = len(q)
    s = [[q[i] * k[j] for j in range(n)] for i in range(n)]
    if prev is None:
        a = s
    else:
        mixed = [[alpha * prev[i][j] + (1 - alpha) * s[i][j] for j in range(n)] for i in range(n)]
        a = [[0.0] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                c = bias
                for di in (-1, 0, 1):
                    for dj in (-1, 0, 1):
                        if 0 <= i + di < n and 0 <= j + dj < n:
                            c += weight[di + 1][dj + 1] * mixed[i + di][j + dj]
                c = c if c > 0 else slope * c
                a[i][j] = beta * c + (1 - beta) * mixed[i][j]
    out = [sum(p * v[j] for j, p in enumerate(_softmax_row(a[i]))) for i in range(n)]
    return out, a


def test_hand_computed_two_layer_single_head_case():
    q1, k1, v1 = [1.0, 0.0, -1.0], [0.5, 1.0, 2.0], [1.0, -2.0, 3.0]
    q2, k2, v2 = [0.5, -1.5, 2.0], [1.0, -0.5, 0.25], [-1.0, 0.5, 2.0]
    weight = [[0.0, 0.5, 0.0], [1.0, -1.0, 0.25], [0.0, 0.5, -0.75]]
    bias, alpha, beta, slope = 0.1, 0.5, 0.5, 0.1

    def tensor(values, n):  # one example of length n, [1, 1, n, 1]
        return torch.tensor(values[:n], dtype=torch.float32)[None, None, :, None]

    conv_w = torch.tensor(weight)[None, None]  # [1, 1, 3, 3]
    conv_b = torch.tensor([bias])
    for n in (2, 3):  # the first two tokens, then the full sequence
        mask = torch.ones(1, n, dtype=torch.bool)
        out1, a1 = Fn.evolving_attention_start(tensor(q1, n), tensor(k1, n), tensor(v1, n), mask)
        out2, a2 = Fn.evolving_attention(tensor(q2, n), tensor(k2, n), tensor(v2, n), mask, a1,
                                         conv_w, conv_b, alpha=alpha, beta=beta,
                                         negative_slope=slope)
        hand1, hand_a1 = _hand_layer(q1[:n], k1[:n], v1[:n], None, None, None, 0, 0, 0)
        hand2, hand_a2 = _hand_layer(q2[:n], k2[:n], v2[:n], hand_a1, weight, bias, alpha, beta,
                                     slope)
        assert_close(out1.flatten(), torch.tensor(hand1))
        assert_close(a1[0, 0], torch.tensor(hand_a1))
        assert_close(out2.flatten(), torch.tensor(hand2))
        assert_close(a2[0, 0], torch.tensor(hand_a2))
    # the length-2 example right-padded to 3 (garbage in the pad) gives the same real values
    mask = lengths_mask([2], 3)

    def padded(values):
        return torch.tensor(values[:2] + [7.0])[None, None, :, None]

    out1, a1 = Fn.evolving_attention_start(padded(q1), padded(k1), padded(v1), mask)
    out2, a2_padded = Fn.evolving_attention(padded(q2), padded(k2), padded(v2), mask, a1, conv_w,
                                            conv_b, alpha=alpha, beta=beta, negative_slope=slope)
    hand1, hand_a1 = _hand_layer(q1[:2], k1[:2], v1[:2], None, None, None, 0, 0, 0)
    hand2, hand_a2 = _hand_layer(q2[:2], k2[:2], v2[:2], hand_a1, weight, bias, alpha, beta, slope)
    assert_close(out2.flatten()[:2], torch.tensor(hand2))
    assert_close(a2_padded[0, 0, :2, :2], torch.tensor(hand_a2))
    # and one number written out: layer 2, entry (0, 0) of the full sequence
    s00 = 0.5 * 1.0  # q2[0] * k2[0]
    mixed = [[0.5 * q1[i] * k1[j] + 0.5 * q2[i] * k2[j] for j in range(3)] for i in range(3)]
    c00 = bias + (-1.0) * mixed[0][0] + 0.25 * mixed[0][1] + 0.5 * mixed[1][0] \
        - 0.75 * mixed[1][1]
    c00 = c00 if c00 > 0 else 0.1 * c00
    assert mixed[0][0] == pytest.approx(0.5 * 0.5 + 0.5 * s00)
    assert float(a2[0, 0, 0, 0]) == pytest.approx(0.5 * c00 + 0.5 * mixed[0][0], abs=1e-6)
