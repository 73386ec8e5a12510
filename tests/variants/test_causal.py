"""Causal attention for every variant (issue #49, docs/variants.md §5), from one table of cases
(tests/variants/causal_cases.py): causality of layers and references, incremental decoding with
the cache against full recomputation, and the refusals (docs/variants.md §6 C8, C9); the op
bodies against their references are tests/variants/test_causal_ops.py's (C10).

Letters: b batch, h heads, i/j query/key positions, d head dim, n new tokens, D model dim.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attndeploy.errors import ConfigError
from attndeploy.variants.api import causal_allowed, reorder_state, state_names
from attndeploy.variants.ganet.causal import CausalGatedAttention, CausalGateNetwork
from attndeploy.variants.qvi.causal import CausalQVIAttention
from tests.variants import causal_cases as tests_cases
from tests.variants.causal_cases import (
    CAUSAL_CASES,
    D_MODEL,
    FP32_TOLERANCE,
    HEADS,
    NO_CAUSAL_FORM,
    REF_CASES,
    RefCase,
    left_padded,
)

BATCH, SEQ = 3, 9
CHUNKS = (3, 1, 1, 2, 1, 1)  # a prefill of 3, then steps of 1 and 2: 9 tokens in all
CASES = [pytest.param(case, id=case.id) for case in CAUSAL_CASES]
REFS = [pytest.param(name, id=name) for name in sorted(REF_CASES)]


def _inputs(seed: int = 0) -> Tensor:
    return torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(seed))


def _perturbed_after(x: Tensor, t: int, seed: int = 99) -> Tensor:
    """x [B, T, D] with every token after position t replaced."""
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    future = torch.arange(x.shape[1])[None, :, None] > t  # [1, T, 1]
    return torch.where(future, 3.0 * noise, x)


def _assert_close(got: Tensor, want: Tensor, what: str, atol: float = FP32_TOLERANCE) -> None:
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    err = (got - want).abs().max().item() if got.numel() else 0.0
    assert err <= atol, f"{what}: max abs error {err:.3g} > {atol}"


# ----------------------------------------------------------------------------- causality


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("case", CASES)
def test_layers_outputs_up_to_t_ignore_every_later_token(case, padded):
    stack = case.stack()
    mask = left_padded(BATCH, SEQ) if padded else None
    x = _inputs()
    with torch.no_grad():
        base, _ = stack(x, mask)
        for t in (0, 3, SEQ - 2):
            changed, _ = stack(_perturbed_after(x, t), mask)
            _assert_close(changed[:, : t + 1], base[:, : t + 1], f"{case.id} t={t}", atol=0.0)
            assert not torch.allclose(changed[:, t + 1:], base[:, t + 1:]), (
                "the perturbation must reach the later outputs (else the test tests nothing)"
            )


def _future_mask(shape: torch.Size, axes: tuple[int, ...], t: int) -> Tensor:
    """bool, broadcastable to `shape` (a whole sequence's input): True where any position axis
    indexes a token after t."""
    future = torch.zeros((1,) * len(shape), dtype=torch.bool)
    for axis in axes:
        size = shape[axis]
        positions = torch.arange(size)
        view = [1] * len(shape)
        view[axis] = size
        future = future | (positions > t).view(view)
    return future


def _perturb_inputs(ref: RefCase, inputs: dict[str, Tensor], t: int) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(7)
    out = {}
    for name, value in inputs.items():
        axes = ref.positions.get(name)
        if axes is None or name == "key_padding_mask":
            out[name] = value
            continue
        future = _future_mask(value.shape, axes, t)
        out[name] = torch.where(future, 3.0 * torch.randn(value.shape, generator=g), value)
    return out


def _run_reference(ref: RefCase, inputs: dict[str, Tensor]) -> tuple[Tensor, ...]:
    with torch.no_grad():
        result = ref.reference(*inputs.values(), **ref.attributes)
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("name", REFS)
def test_references_rows_up_to_t_ignore_every_later_token(name):
    ref = REF_CASES[name]
    inputs = ref.inputs(torch.Generator().manual_seed(1), BATCH, SEQ, SEQ)
    base = _run_reference(ref, inputs)
    for t in (0, 4, SEQ - 2):
        changed = _run_reference(ref, _perturb_inputs(ref, inputs, t))
        for index in ref.causal_outputs:  # [B, H, T, ...]: rows by position
            _assert_close(changed[index][:, :, : t + 1], base[index][:, :, : t + 1],
                          f"{name} output {index} t={t}", 0.0)
    if ref.op.startswith("CausalEvolving"):  # the handed-on logits [B, H, T, T]
        upper = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
        assert (base[1][:, :, upper] == 0).all(), "keys after their query must be zeroed"


def test_the_causal_rule_opens_the_diagonal_of_a_padded_query_only():
    mask = torch.tensor([[False, True, True]])  # one left pad
    allowed = causal_allowed(mask, 3)[0, 0]  # [Tq, Tk]
    assert allowed.tolist() == [[True, False, False], [False, True, False], [False, True, True]]
    decode = causal_allowed(mask, 1)[0, 0]  # the last query of the three
    assert decode.tolist() == [[False, True, True]]


# ----------------------------------------------------------------------------- the cache


def _decode(stack, x: Tensor, mask: Tensor | None, chunks=CHUNKS):
    """Run x [B, T, D] through the stack chunk by chunk with the cache: outputs [B, T, D]."""
    past, outputs, start = None, [], 0
    for size in chunks:
        seen = None if mask is None else mask[:, : start + size]  # [B, seen]
        y, past = stack(x[:, start:start + size], seen, past)
        outputs.append(y)
        start += size
    return torch.cat(outputs, dim=1), past


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("case", CASES)
def test_incremental_decoding_with_the_cache_equals_full_recomputation(case, padded):
    stack = case.stack()
    mask = left_padded(BATCH, SEQ) if padded else None
    x = _inputs()
    with torch.no_grad():
        full, _ = stack(x, mask)
        incremental, _ = _decode(stack, x, mask)
        one_by_one, _ = _decode(stack, x, mask, chunks=(1,) * SEQ)
    _assert_close(incremental, full, f"{case.id} chunks {CHUNKS}")
    _assert_close(one_by_one, full, f"{case.id} one token at a time")


@pytest.mark.parametrize("case", CASES)
def test_decoding_from_the_empty_state_equals_decoding_from_none(case):
    """One graph for prefill and decode: an empty past (P = 0 tensors) is no past."""
    stack = case.stack()
    x, mask = _inputs(), left_padded(BATCH, SEQ)
    with torch.no_grad():
        want, want_state = stack(x[:, :4], mask[:, :4])
        empty = stack.empty_state(BATCH, x)
        got, got_state = stack(x[:, :4], mask[:, :4], empty)
    assert set(empty) == set(want_state) == set(got_state)
    _assert_close(got, want, case.id, atol=0.0)
    for name, value in want_state.items():
        assert got_state[name].shape == value.shape, name
        _assert_close(got_state[name].float(), value.float(), name, atol=0.0)


@pytest.mark.parametrize("case", CASES)
def test_beam_reordering_the_state_reorders_the_decoding(case):
    """Every state tensor has the batch first: reordering the state (and the inputs) equals
    decoding the reordered batch from the start."""
    stack = case.stack()
    x = _inputs()
    order = torch.tensor([2, 0, 0])
    with torch.no_grad():
        _, past = stack(x[:, :5])
        moved, _ = stack(x[order, 5:6], None, reorder_state(past, order))
        want, _ = stack(x[order, :6])
    _assert_close(moved[:, 0], want[:, 5], f"{case.id} reordered")


@pytest.mark.parametrize("case", CASES)
def test_state_is_named_by_optimums_convention(case):
    stack = case.stack()
    with torch.no_grad():
        _, present = stack(_inputs()[:, :4])
    for index, layer in enumerate(stack.layers):
        names = state_names(index, dict.fromkeys(layer.STATE_NAMES))
        assert names["key"] == (f"past_key_values.{index}.key", f"present.{index}.key")
        for past_name, _ in names.values():
            assert past_name in present, f"{case.id}: {past_name} missing from the state"
        key = present[f"past_key_values.{index}.key"]
        assert key.shape[:2] == (BATCH, HEADS)  # [B, H, P, d]
    if case.variant == "evolving":
        rows = present["past_key_values.1.evolving_rows"]
        assert rows.shape == (BATCH, HEADS, 2, 4)  # the last two rows of the mixed map


def test_a_closed_gate_keeps_its_token_out_of_the_cache():
    """Batch 1: the cache holds exactly the open tokens, so its memory follows the density."""
    torch.manual_seed(0)
    network = CausalGateNetwork(D_MODEL, kind="mlp", hidden=8).eval()
    layer = CausalGatedAttention(D_MODEL, HEADS).eval()
    x = _inputs()[:1]
    past, opened = None, 0
    with torch.no_grad():
        for t in range(SEQ):
            logits, _ = network(x[:, t:t + 1])
            result = layer(x[:, t:t + 1], None, logits, past)
            past = result.present
            opened += int(result.gates.sum())
    assert 0 < opened < SEQ, "the tiny gate network should open some tokens and close others"
    assert past["key"].shape[2] == opened and past["value"].shape[2] == opened
    assert past["key_mask"].all()


def test_pooled_qvi_is_refused_in_a_causal_layer_with_one_line():
    with pytest.raises(ConfigError) as info:
        CausalQVIAttention(D_MODEL, HEADS, form="pooled")
    message = str(info.value)
    assert "\n" not in message
    assert "'pooled' reads every query" in message and "'prefix'" in message


def test_a_prefix_layer_loads_a_pooled_layers_parameters():
    from attndeploy.nn import QVIAttention

    pooled = QVIAttention(D_MODEL, HEADS, form="pooled")
    CausalQVIAttention(D_MODEL, HEADS, form="prefix").load_state_dict(pooled.state_dict())


def test_a_causal_gate_network_refuses_a_bidirectional_kind():
    with pytest.raises(ConfigError, match="reads only the tokens up to its own"):
        CausalGateNetwork(D_MODEL, kind="bilstm")


def test_decoding_in_training_mode_is_refused_for_gated_layers():
    layer = CausalGatedAttention(D_MODEL, HEADS).train()
    x = _inputs()
    first = layer(x[:, :2], None, torch.ones(BATCH, 2))
    past = {k: v.detach() for k, v in first.present.items()}
    with pytest.raises(ConfigError, match="eval mode"):
        layer(x[:, 2:3], None, torch.ones(BATCH, 1), past)


# ----------------------------------------------------------------------------- the models' call


@pytest.mark.parametrize("case", CASES)
def test_forward_context_runs_a_whole_sequence_as_forward_does(case):
    """A built-in model's pass (`forward_context`, no cache) computes what `forward` does."""
    from attndeploy.variants.api import LayerContext

    stack = case.stack()
    x, mask = _inputs(), left_padded(BATCH, SEQ)
    with torch.no_grad():
        logits = stack.gate_network(x, mask)[0] if stack.gate_network is not None else None
        prev = None
        for layer in stack.layers:
            context = LayerContext(mask, gate_logits=logits, prev_logits=prev)
            got = layer.forward_context(x, context)
            if case.variant == "ganet":
                want = layer(x, mask, logits)
            elif case.variant == "evolving":
                want = layer(x, mask, prev)
                prev = got.logits
            else:
                want = layer(x, mask)
            _assert_close(got.output, want.output, case.id, atol=0.0)


def test_gated_layers_are_causal_in_training_with_relaxed_gates():
    torch.manual_seed(0)
    layer = CausalGatedAttention(D_MODEL, HEADS).train()
    x = _inputs()
    logits = torch.randn(BATCH, SEQ, requires_grad=True)
    base = layer(x, None, logits).output
    t = 4
    changed = layer(_perturbed_after(x, t), None, torch.where(
        torch.arange(SEQ) > t, 5.0 * torch.randn(BATCH, SEQ), logits)).output
    _assert_close(changed[:, : t + 1], base[:, : t + 1], "training", atol=0.0)
    base.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0, "gates must learn"


def test_gated_cache_memory_follows_the_density():
    """Shifting the gate threshold closes tokens; the cache shrinks with the density (batch 1,
    one token a step)."""
    from attndeploy.variants.api import state_bytes

    torch.manual_seed(0)
    network = CausalGateNetwork(D_MODEL, kind="conv", hidden=8).eval()
    layer = CausalGatedAttention(D_MODEL, HEADS).eval()
    x = torch.randn(1, 32, D_MODEL, generator=torch.Generator().manual_seed(4))
    per_token = 2 * HEADS * (D_MODEL // HEADS) * 4 + 1  # key + value fp32, key_mask bool
    measured = []
    for shift in (5.0, 0.0, -0.5):
        with torch.no_grad():
            network.score.bias.fill_(shift)
            past, gate_past, opened = None, None, 0
            for t in range(x.shape[1]):
                logits, gate_past = network(x[:, t:t + 1], None, gate_past)
                result = layer(x[:, t:t + 1], None, logits, past)
                past, opened = result.present, opened + int(result.gates.sum())
        measured.append((opened / x.shape[1], state_bytes(past)))
        assert state_bytes(past) == opened * per_token
    densities = [density for density, _ in measured]
    assert densities[0] == 1.0 and densities[0] > densities[1] > densities[2]


@pytest.mark.parametrize("case", CASES)
def test_every_variant_at_its_warm_start_decodes_as_causal_standard_attention(case):
    """A converted model computes what the pretrained one did: each causal layer after
    `start_as_vanilla` (GA-Net: every gate open) equals causal vanilla attention of the same
    projections, over a whole sequence and step by step with the cache."""
    from attndeploy.nn import CausalStandardAttention

    stack = case.stack()
    vanilla = tests_cases.CausalStack(
        [CausalStandardAttention(D_MODEL, HEADS) for _ in stack.layers]).eval()
    with torch.no_grad():
        for layer, plain in zip(stack.layers, vanilla.layers, strict=True):
            layer.start_as_vanilla()
            plain.qkv.load_state_dict(layer.qkv.state_dict())
            plain.out.load_state_dict(layer.out.state_dict())
        if stack.gate_network is not None:
            stack.gate_network.start_open()
        x, mask = _inputs(), left_padded(BATCH, SEQ)
        want, _ = vanilla(x, mask)
        got, _ = stack(x, mask)
        stepped, _ = _decode(stack, x, mask)
    _assert_close(got, want, f"{case.id} whole sequence")
    _assert_close(stepped, want, f"{case.id} with the cache")


def test_every_registered_variant_has_a_causal_case():
    """Decoders take every variant: a variant registered without a causal case fails here,
    unless `NO_CAUSAL_FORM` gives the reason it has no causal form."""
    from attndeploy.variants.registry import variant_specs

    registered = {spec.name for spec in variant_specs()}
    with_case = {case.variant for case in CAUSAL_CASES}
    assert registered - set(NO_CAUSAL_FORM) == with_case, (
        "each registered variant needs a CausalCase in tests/variants/causal_cases.py, or an "
        "entry in its NO_CAUSAL_FORM with the reason"
    )
    assert set(NO_CAUSAL_FORM) <= registered - with_case, (
        "NO_CAUSAL_FORM names a variant that is not registered or that has a causal case"
    )
    assert all(reason.strip() for reason in NO_CAUSAL_FORM.values())
