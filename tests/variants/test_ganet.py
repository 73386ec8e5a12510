"""GA-Net invariants G1–G10 (docs/variants.md §3, §6): hard gates, rescue, gather path,
relaxation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attndeploy.config import GANetConfig
from attndeploy.data import TextDataset
from attndeploy.errors import ConfigError
from attndeploy.models import build_model
from attndeploy.train import evaluate
from attndeploy.variants import functional as Fn
from attndeploy.variants.api import LayerContext
from attndeploy.variants.ganet.layer import (
    HARD_CONCRETE_FLOOR,
    GateController,
    _relaxed_probs,
    logistic_noise,
    relax_gates,
    relaxed_gates,
    soft_density,
)
from tests.cases import CASES_BY_ID, select
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

GATED_CASES = [case.id for case in select(lambda c: c.is_gated)]


def reference_hard_gates(logits: Tensor, mask: Tensor) -> Tensor:
    """§3.6 written as a loop: open = s > 0 on real keys; else open the first real argmax."""
    gates = torch.zeros_like(mask)
    for b in range(mask.shape[0]):
        real = [t for t in range(mask.shape[1]) if mask[b, t]]
        opened = [t for t in real if logits[b, t] > 0]
        if not real:
            opened = [0]
        elif not opened:
            best = max(float(logits[b, t]) for t in real)
            opened = [next(t for t in real if float(logits[b, t]) == best)]
        gates[b, opened] = True
    return gates


def reference_pooling(values: Tensor, scores: Tensor, allowed: Tensor) -> Tensor:
    """Softmax of scores over allowed positions, then the weighted sum of values: [B, D]."""
    alpha = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.einsum("bt,btd->bd", alpha, values)


@pytest.fixture
def batch():
    lengths = [7, 5, 2, 1]
    q, k, v = qkv(len(lengths), 3, 7, 4, seed=60)
    return q, k, v, lengths_mask(lengths, 7)


def _force_gate_logits(model, value: float) -> None:
    """Make the auxiliary network output `value` for every token."""
    with torch.no_grad():
        model.gates.network.score.weight.zero_()
        model.gates.network.score.bias.fill_(value)


# ----------------------------------------------------------------------------- G1


def test_all_gates_open_gives_vanilla_attention(batch):
    q, k, v, mask = batch
    out, gates = Fn.gated_attention(q, k, v, mask, torch.full(mask.shape, 4.0))
    assert torch.equal(gates, mask)
    assert_close_valid(out, vanilla_attention(q, k, v, mask), mask)


def test_all_gates_open_gives_ungated_pooling(batch):
    _, _, v, mask = batch
    values = v.transpose(1, 2).flatten(2)  # [B, T, 12]
    scores = randn(*mask.shape, seed=61)
    context, _ = Fn.gated_attention_pooling(values, scores, mask, torch.full(mask.shape, 4.0))
    assert_close(context, reference_pooling(values, scores, mask))


@pytest.mark.parametrize("case_id", ["ganet_mlp", "ganet_bilstm_family", "ganet_tagging"])
def test_gated_model_with_every_gate_open_equals_its_standard_model(case_id):
    config = CASES_BY_ID[case_id].config()
    gated = build_model(config).eval()
    _force_gate_logits(gated, 5.0)
    standard = build_model(config.replace(variant="standard")).eval()
    missing, unexpected = standard.load_state_dict(gated.state_dict(), strict=False)
    assert not missing and all(name.startswith("gates.") for name in unexpected)
    ids, am = token_batch([10, 6, 1], 10)
    out = gated(ids, am)
    assert torch.equal(out["gates"], am.bool())
    assert_close(out["logits"], standard(ids, am)["logits"])


# ----------------------------------------------------------------------------- G2


def test_hard_gate_attention_is_vanilla_with_the_mask_replaced_by_the_gates(batch):
    q, k, v, mask = batch
    logits = randn(*mask.shape, seed=62)
    out, gates = Fn.gated_attention(q, k, v, mask, logits)
    expected_gates = reference_hard_gates(logits, mask)
    assert torch.equal(gates, expected_gates)
    assert_close_valid(out, vanilla_attention(q, k, v, expected_gates), mask)


def test_hard_gate_pooling_is_ungated_pooling_over_the_open_positions(batch):
    _, _, v, mask = batch
    values, scores, logits = v.transpose(1, 2).flatten(2), randn(4, 7, seed=63), randn(4, 7)
    context, gates = Fn.gated_attention_pooling(values, scores, mask, logits)
    assert torch.equal(gates, reference_hard_gates(logits, mask))
    assert_close(context, reference_pooling(values, scores, gates))


def test_closed_keys_get_exactly_zero_weight_in_every_head_and_query(batch):
    q, k, v, mask = batch
    logits = randn(*mask.shape, seed=64)
    out, gates = Fn.gated_attention(q, k, v, mask, logits)
    moved_v, moved_k = v.clone(), k.clone()
    closed = ~gates[:, None, :, None].expand_as(v)
    moved_v[closed], moved_k[closed] = 1e3, -1e3
    again, _ = Fn.gated_attention(q, moved_k, moved_v, mask, logits)
    assert torch.equal(again, out)


# ----------------------------------------------------------------------------- G3


def test_gate_logit_zero_is_closed():
    logits = torch.tensor([[0.0, 1e-6, -1e-6, 0.0]])
    gates = Fn.hard_gates(logits, torch.ones(1, 4, dtype=torch.bool))
    assert gates.tolist() == [[False, True, False, False]]


def test_gates_decide_on_logits_where_sigmoid_underflows_to_zero():
    logits = torch.tensor([[-120.0, -110.0, -115.0]])
    assert torch.sigmoid(logits).max() == 0  # probabilities cannot tell them apart in fp32
    gates = Fn.hard_gates(logits, torch.ones(1, 3, dtype=torch.bool))
    assert gates.tolist() == [[False, True, False]]


def test_logits_around_minus_thirty_give_a_finite_single_key_output(batch):
    q, k, v, mask = batch
    logits = -30.0 + 0.5 * randn(*mask.shape, seed=65)
    out, gates = Fn.gated_attention(q, k, v, mask, logits)
    assert torch.equal(gates.sum(-1), torch.ones(4, dtype=torch.long))
    assert torch.isfinite(out).all()
    # one open key: every query returns that key's value exactly
    expected = torch.stack([v[b, :, int(gates[b].nonzero())] for b in range(4)])  # [B, H, d]
    assert_close_valid(out, expected[:, :, None, :].expand_as(out).contiguous(), mask)


# ----------------------------------------------------------------------------- G4


@pytest.mark.parametrize(
    "logits, lengths, expected",
    [
        ([-3.0, -1.0, -2.0, -4.0], 4, [False, True, False, False]),
        ([-1.0, -0.5, -0.5, -2.0], 4, [False, True, False, False]),  # tie: smallest index
        ([-0.5, -0.5, -0.5, -0.5], 4, [True, False, False, False]),
        ([-3.0, -2.0, 5.0, 9.0], 2, [False, True, False, False]),  # larger pads never open
        ([0.0, 0.0, 7.0, 7.0], 2, [True, False, False, False]),  # s = 0 closed, then rescued
        ([2.0, -1.0, 3.0, 5.0], 3, [True, False, True, False]),  # something open: no rescue
        ([-1.0, 4.0, 4.0, 4.0], 0, [True, False, False, False]),  # no real key: position 0
    ],
    ids=["argmax", "tie", "all-equal", "pads-larger", "zero-is-closed", "no-rescue", "no-real"],
)
def test_hard_gates_open_the_largest_real_logit_when_all_are_closed(logits, lengths, expected):
    mask = lengths_mask([lengths], 4)
    gates = Fn.hard_gates(torch.tensor([logits]), mask)
    assert gates[0].tolist() == expected
    assert torch.equal(gates, reference_hard_gates(torch.tensor([logits]), mask))


def test_rescued_rows_give_finite_attention_and_pooling():
    q, k, v = qkv(3, 2, 4, 4, seed=66)
    mask = lengths_mask([4, 2, 0], 4)
    logits = torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-5.0, -5.0, 9.0, 9.0], [1.0, 1.0, 1.0, 1.0]])
    for gather in (False, True):
        out, gates = Fn.gated_attention(q, k, v, mask, logits, gather_open_keys=gather)
        assert torch.isfinite(out).all()
        assert gates.tolist() == [[True, False, False, False]] * 3
    context, _ = Fn.gated_attention_pooling(v.transpose(1, 2).flatten(2), randn(3, 4), mask,
                                            logits)
    assert torch.isfinite(context).all()


def test_rescue_counter_rises_by_one_per_all_closed_example():
    config = CASES_BY_ID["ganet_mlp"].config()
    model = build_model(config).eval()
    _force_gate_logits(model, -3.0)
    ids, am = token_batch([8, 5, 3, 1, 8], 8)
    data = TextDataset(ids, am, torch.zeros(5, dtype=torch.long), ("a", "b", "c"),
                       "classification")
    metrics = evaluate(model, data, batch_size=2)
    assert metrics["rescues"] == 5 and metrics["rescue_rate"] == 1.0
    assert metrics["density"] == pytest.approx((1 / 8 + 1 / 5 + 1 / 3 + 1 + 1 / 8) / 5)


# ----------------------------------------------------------------------------- G5


@pytest.mark.parametrize(
    "logits",
    [
        randn(4, 7, seed=67),  # different open counts per row
        torch.full((4, 7), -1.0) - torch.arange(7.0),  # every row rescued: N = 1
        torch.cat([torch.full((1, 7), 2.0), torch.full((3, 7), -2.0)]),  # N = 7 and 1 mixed
    ],
    ids=["mixed-counts", "N=1", "full-and-one"],
)
def test_gather_path_equals_the_dense_masked_path(batch, logits):
    q, k, v, mask = batch
    dense, dense_gates = Fn.gated_attention(q, k, v, mask, logits)
    gathered, gathered_gates = Fn.gated_attention(q, k, v, mask, logits, gather_open_keys=True)
    assert torch.equal(dense_gates, gathered_gates)
    assert_close_valid(gathered, dense, mask)


def test_gather_model_equals_the_dense_model():
    dense_case, gather_case = CASES_BY_ID["ganet_mlp"], CASES_BY_ID["ganet_gather"]
    dense = build_model(dense_case.config()).eval()
    gathered = build_model(gather_case.config()).eval()
    gathered.load_state_dict(dense.state_dict())
    ids, am = token_batch([12, 7, 3, 1], 12, seed=3)
    a, b = dense(ids, am), gathered(ids, am)
    assert torch.equal(a["gates"], b["gates"])
    assert_close(b["logits"], a["logits"])


# ----------------------------------------------------------------------------- G6


def _aux_grads(model) -> list[Tensor | None]:
    return [p.grad for p in model.gates.network.parameters()]


@pytest.mark.parametrize("case_id", ["ganet_tagging", "ganet_mlp", "ganet_conv",
                                     "ganet_bilstm_family"])
def test_task_loss_alone_sends_gradients_to_the_auxiliary_network(case_id):
    """lambda = 0: the gradient reaches the gates through attention (tagging: attention only)
    and the gated pooling."""
    base = CASES_BY_ID[case_id].config()
    config = base.replace(ganet=dataclasses.replace(base.ganet, density_weight=0.0))
    model = build_model(config).train()
    ids, am = token_batch([9, 6, 3], 9)
    logits = model(ids, am)["logits"]
    target = torch.zeros(logits.shape[:-1], dtype=torch.long)
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)).backward()
    grads = _aux_grads(model)
    assert all(g is not None for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


def test_density_regulariser_alone_sends_gradients_to_the_auxiliary_network_only():
    model = build_model(CASES_BY_ID["ganet_mlp"].config()).train()
    ids, am = token_batch([9, 6, 3], 9)
    out = model(ids, am, details=True)
    out["density_penalty"].backward()
    grads = _aux_grads(model)
    assert all(g is not None and g.abs().sum() > 0 for g in grads[-2:])  # the score layer
    assert all(p.grad is None for p in model.blocks.parameters())


def test_straight_through_forward_is_hard_and_the_gate_gradient_is_the_soft_one():
    scores = randn(2, 3, 5, 5, seed=70)
    mask = lengths_mask([5, 3], 5)
    logits = randn(2, 5, seed=71)
    log_gates = F.logsigmoid(logits).requires_grad_()
    hard = Fn.hard_gates(logits, mask)
    context = LayerContext(mask, gate_logits=logits, log_gates=log_gates, hard_gates=hard)
    probs = _relaxed_probs(scores, context, (slice(None), None, None, slice(None)))
    assert_close(probs, Fn.masked_softmax(scores, hard[:, None, None, :]), (1e-6, 1e-6))
    soft = Fn.masked_softmax(scores + log_gates[:, None, None, :], mask[:, None, None])
    weights = randn(2, 3, 5, 5, seed=72)
    (grad_st,) = torch.autograd.grad((probs * weights).sum(), log_gates)
    (grad_soft,) = torch.autograd.grad((soft * weights).sum(), log_gates)
    assert_close(grad_st, grad_soft)
    assert grad_st.abs().sum() > 0


# ----------------------------------------------------------------------------- G7


def _controller(temperature: float = 1.0, gate_mode: str = "threshold",
                relaxation: str = "concrete") -> GateController:
    config = CASES_BY_ID["ganet_mlp"].config(
        ganet=GANetConfig(aux_hidden=8, temperature=temperature, gate_mode=gate_mode,
                          relaxation=relaxation)
    )
    return GateController(config.d_model, config)


def test_relaxed_gates_lie_strictly_between_zero_and_one():
    controller = _controller().train()
    mask = lengths_mask([6, 2], 6)
    state = controller(randn(2, 6, 16, seed=73), mask)
    assert state.soft_gates is not None and state.log_gates is not None
    assert (state.soft_gates > 0).all() and (state.soft_gates < 1).all()
    assert_close(state.log_gates, torch.log(state.soft_gates), (1e-6, 1e-5))


def test_hard_concrete_gates_are_exactly_zero_or_one_when_clear_and_keep_a_gradient_between():
    logits = torch.tensor([[-9.0, -2.5, -0.3, 0.0, 0.4, 2.5, 9.0]], requires_grad=True)
    gates = relaxed_gates(logits, 1.0, "hard_concrete")  # σ stretched to (-0.1, 1.1), clipped
    assert gates[0, :2].eq(0.0).all() and gates[0, -2:].eq(1.0).all()
    assert ((gates[0, 2:5] > 0) & (gates[0, 2:5] < 1)).all()
    assert gates[0, 3].item() == pytest.approx(0.5)  # the threshold stays at logit 0
    (grad,) = torch.autograd.grad(gates.sum(), logits)
    assert grad[0, :2].eq(0).all() and grad[0, -2:].eq(0).all() and (grad[0, 2:5] > 0).all()
    concrete = relaxed_gates(logits, 1.0, "concrete")
    assert ((concrete > 0) & (concrete < 1)).all()


def test_a_hard_concrete_closed_key_weighs_nothing_in_training_and_gradients_stay_finite(batch):
    q, k, v, mask = batch
    logits = torch.full(mask.shape, 3.0)
    logits[:, 1] = -2.5  # key 1 closed: the concrete gate still lets σ(-2.5) = 0.08 through
    logits[:, 0] = 0.2  # key 0 near the threshold: it keeps a gradient
    logits.requires_grad_()
    scores = q @ k.transpose(-2, -1)  # [B, H, T, T]
    probs = {}
    for relaxation in ("concrete", "hard_concrete"):
        context = relax_gates(logits, mask, 1.0, False, relaxation)
        probs[relaxation] = _relaxed_probs(scores, context,
                                           (slice(None), None, None, slice(None)))
    assert context.log_gates[0, 1].item() == pytest.approx(math.log(HARD_CONCRETE_FLOOR))
    real = mask[:, 1]  # the examples where key 1 is a real token
    ratio = probs["hard_concrete"][real][..., 1] / probs["concrete"][real][..., 1]
    assert ratio.max().item() < 1e-3  # about 1e-6 / 0.08, up to renormalisation
    (grad,) = torch.autograd.grad((probs["hard_concrete"] @ v).sum(), logits)
    assert torch.isfinite(grad).all() and float(grad[:, 0].abs().sum()) > 0
    assert float(grad[:, 1].abs().sum()) == 0.0  # a clipped gate has no gradient


@pytest.mark.parametrize("case_id", GATED_CASES)
def test_the_relaxation_changes_training_only_eval_outputs_are_the_same(case_id):
    config = CASES_BY_ID[case_id].config()
    torch.manual_seed(5)
    concrete = build_model(config).eval()
    hard = build_model(dataclasses.replace(
        config, ganet=dataclasses.replace(config.ganet, relaxation="hard_concrete"))).eval()
    hard.load_state_dict(concrete.state_dict())
    ids, am = token_batch([9, 6, 3], 9)
    first, second = concrete(ids, am), hard(ids, am)
    assert torch.equal(first["logits"], second["logits"])
    assert torch.equal(first["gates"], second["gates"])


def test_hard_concrete_training_penalises_the_clipped_gates_and_can_close_a_gate_fully():
    controller = _controller(relaxation="hard_concrete").train()
    with torch.no_grad():
        controller.network.score.weight.zero_()
        controller.network.score.bias.fill_(-40.0)  # every gate clearly closed, noise or not
    mask = lengths_mask([6, 2], 6)
    state = controller(randn(2, 6, 16, seed=75), mask)
    assert state.soft_gates.eq(0.0).all()
    assert soft_density(state.soft_gates, mask).item() == 0.0


def test_an_unknown_relaxation_is_refused():
    with pytest.raises(ConfigError, match="unknown gate relaxation 'gumbel'"):
        GANetConfig(relaxation="gumbel")


@pytest.mark.parametrize("s", [-2.0, -0.5, 0.0, 1.0, 3.0])
def test_logistic_noise_makes_the_open_rate_sigmoid_of_the_logit(s):
    generator = torch.Generator().manual_seed(int(10 * s) + 100)
    noise = logistic_noise(torch.Size([200_000]), like=torch.zeros(1), generator=generator)
    rate = float(((s + noise) > 0).double().mean())
    assert rate == pytest.approx(1 / (1 + math.exp(-s)), abs=0.006)


def test_small_temperature_makes_relaxed_gates_nearly_hard():
    controller = _controller(temperature=1e-3).train()
    state = controller(randn(4, 8, 16, seed=74), lengths_mask([8] * 4, 8))
    hard = (state.gate_logits > 0).float()  # gate_logits = s + L in training
    clear = state.gate_logits.abs() > 0.05
    assert clear.sum() > 16
    assert torch.allclose(state.soft_gates[clear], hard[clear], atol=1e-6)


# ----------------------------------------------------------------------------- G8


def test_training_noise_is_reproducible_under_a_fixed_seed():
    model = build_model(CASES_BY_ID["ganet_mlp"].config()).train()
    ids, am = token_batch([9, 6, 3], 9)
    torch.manual_seed(123)
    first = model(ids, am, details=True)
    torch.manual_seed(123)
    second = model(ids, am, details=True)
    torch.manual_seed(124)
    third = model(ids, am, details=True)
    assert torch.equal(first["logits"], second["logits"])
    assert torch.equal(first["density_penalty"], second["density_penalty"])
    assert not torch.equal(first["density_penalty"], third["density_penalty"])


def test_sample_mode_is_reproducible_under_a_fixed_seed_and_does_sample():
    config = CASES_BY_ID["ganet_mlp"].config(ganet=GANetConfig(aux_hidden=8, gate_mode="sample"))
    model = build_model(config).eval()
    ids, am = token_batch([12] * 4, 12)
    runs = []
    for seed in (5, 5, 6, 7):
        torch.manual_seed(seed)
        out = model(ids, am, details=True)
        # the reported logits are the ones decided on (s + L), so rescues can be counted
        assert torch.equal(out["gates"], Fn.hard_gates(out["gate_logits"], am.bool()))
        runs.append(out["gates"])
    assert torch.equal(runs[0], runs[1])
    assert any(not torch.equal(runs[0], other) for other in runs[2:])


def test_threshold_eval_consumes_no_randomness():
    model = build_model(CASES_BY_ID["ganet_mlp"].config()).eval()
    ids, am = token_batch([9, 6, 3], 9)
    before = torch.get_rng_state()
    model(ids, am, details=True)
    assert torch.equal(torch.get_rng_state(), before)


# ----------------------------------------------------------------------------- G9


def test_soft_density_excludes_pads_and_normalises_per_example():
    soft = torch.tensor([[0.5, 0.25, 0.9, 0.9], [1.0, 0.8, 0.7, 0.6]])
    mask = torch.tensor([[True, True, False, False], [True, False, False, False]])
    # example 0: (0.5 + 0.25) / 2 = 0.375; example 1: 1.0 / 1 = 1.0; mean 0.6875
    assert float(soft_density(soft, mask)) == pytest.approx(0.6875)


A, B = 5, 6  # token ids whose gate logits are set to about +2 (open) and -1 (closed)


def _model_with_token_gates():
    """A GA-Net model whose gate logit is about +2 for token A and -1.004 for every other token."""
    model = build_model(CASES_BY_ID["ganet_mlp"].config()).eval()
    with torch.no_grad():
        model.embed.weight[:, 0] = 0.0
        model.embed.weight[A, 0], model.embed.weight[B, 0] = 3.0, -3.0
        first, score = model.gates.network.body[0], model.gates.network.score
        first.weight.zero_(), first.bias.zero_(), score.weight.zero_()
        first.weight[0, 0] = 1.0
        score.weight[0, 0], score.bias[0] = 1.0, -1.0  # s = GELU(e_0) - 1
    return model


def test_evaluation_density_counts_rescued_gates_and_excludes_pads():
    model = _model_with_token_gates()
    ids = torch.tensor([[A, B, B, 0], [B, B, 0, 0], [A, A, B, A]])
    am = (ids != 0).long()
    out = model(ids, am, details=True)
    expected = [[True, False, False, False],  # 1 of 3 open
                [True, False, False, False],  # all closed: the tie is rescued at index 0 -> 1/2
                [True, True, False, True]]  # 3 of 4
    assert out["gates"].tolist() == expected
    data = TextDataset(ids, am, torch.zeros(3, dtype=torch.long), ("a", "b", "c"),
                       "classification")
    metrics = evaluate(model, data)
    assert metrics["density"] == pytest.approx((1 / 3 + 1 / 2 + 3 / 4) / 3)
    assert metrics["rescues"] == 1 and metrics["rescue_rate"] == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------- G10


@pytest.mark.parametrize("case_id", GATED_CASES)
def test_model_gates_are_the_hard_gates_of_its_gate_logits_and_never_pads(case_id):
    model = build_model(CASES_BY_ID[case_id].config()).eval()
    ids, am = token_batch([11, 7, 2, 1], 11, seed=4)
    out = model(ids, am, details=True)
    assert torch.equal(out["gates"], Fn.hard_gates(out["gate_logits"], am.bool()))
    assert not (out["gates"] & ~am.bool()).any()


@pytest.mark.parametrize("case_id", ["ganet_mlp", "ganet_gather", "ganet_tagging",
                                     "ganet_bilstm_family"])
def test_every_layer_and_the_pooling_apply_the_same_gates(case_id, monkeypatch):
    model = build_model(CASES_BY_ID[case_id].config()).eval()
    ids, am = token_batch([11, 7, 2, 1], 11, seed=4)
    applied: list[Tensor] = []

    def recording(reference):
        def run(*args, **kwargs):
            result = reference(*args, **kwargs)
            applied.append(result[1])
            return result
        return run

    from attndeploy.variants.ganet import reference

    for name in ("gated_attention", "gated_attention_pooling"):  # the layers call
        for module in (Fn, reference):  # reference.<name>, the pooling Fn.<name>
            monkeypatch.setattr(module, name, recording(getattr(module, name)))
    gates = model(ids, am)["gates"]
    n_attention = 0 if CASES_BY_ID[case_id].family == "bilstm" else model.config.n_layers
    n_pooling = 1 if CASES_BY_ID[case_id].head == "classification" else 0
    assert len(applied) == n_attention + n_pooling
    assert all(torch.equal(g, gates) for g in applied)
