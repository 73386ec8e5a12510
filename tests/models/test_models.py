"""Model-level contracts C1–C6 (docs/variants.md §6) for every row of the case table.

All comparisons are in eval mode (GA-Net: threshold gates) and read real positions only.
"""

from __future__ import annotations

import pytest
import torch

from attndeploy.config import FAMILIES
from attndeploy.errors import DataError
from attndeploy.models import build_model
from attndeploy.variants import registered_variants
from tests.cases import CASES, TINY_MAX_SEQ, TINY_VOCAB, case_params
from tests.helpers import assert_close, token_batch

pytestmark = pytest.mark.usefixtures("torch_defaults")

MIXED = [7, 3, 1, 5]


def _model(case):
    return build_model(case.config()).eval()


def _real_logits(case, logits: torch.Tensor, row: int, length: int) -> torch.Tensor:
    """An example's logits on its real tokens: [C] (classification) or [length, C] (tagging)."""
    return logits[row, :length] if case.head == "tagging" else logits[row]


# ----------------------------------------------------------------------------- the table


def test_every_registered_variant_has_a_case():
    covered = {case.variant for case in CASES}
    missing = sorted(set(registered_variants()) - covered)
    assert not missing, f"add a VariantCase to tests/cases.py for: {', '.join(missing)}"


def test_every_variant_option_of_interest_has_a_case():
    configs = [case.config() for case in CASES]
    qvi_forms = {c.qvi.form for c in configs if c.variant == "qvi"}
    aux_networks = {c.ganet.aux for c in configs if c.variant == "ganet"}
    assert qvi_forms == {"pooled", "pairwise"}
    assert aux_networks == {"mlp", "conv", "bilstm"}
    assert {c.family for c in configs} == set(FAMILIES)
    assert {c.head for c in configs} == {"classification", "tagging"}


def test_case_ids_are_unique_and_configs_are_valid():
    assert len({case.id for case in CASES}) == len(CASES)
    for case in CASES:
        config = case.config()
        assert config.variant == case.variant and config.family == case.family
        assert case.tolerance("float32") and case.tolerance("float16")


# ----------------------------------------------------------------------------- C1, C2


@pytest.mark.parametrize("case", case_params("shapes"))
@pytest.mark.parametrize("lengths", [[1], [1, 1], [7, 7, 7], MIXED], ids=["T1", "T1x2", "odd",
                                                                          "mixed"])
def test_model_outputs_have_the_contract_shapes_and_are_finite(case, lengths):
    model = _model(case)
    ids, am = token_batch(lengths)
    out = model(ids, am)
    batch, t, labels = len(lengths), max(lengths), model.config.num_labels
    expected = (batch, t, labels) if case.head == "tagging" else (batch, labels)
    assert tuple(out["logits"].shape) == expected
    assert torch.isfinite(out["logits"]).all()
    if case.is_gated:
        assert out["gates"].dtype == torch.bool and tuple(out["gates"].shape) == (batch, t)
    else:
        assert "gates" not in out


@pytest.mark.parametrize("case", case_params("train_forward"))
def test_training_forward_and_backward_are_finite(case):
    model = build_model(case.config()).train()
    ids, am = token_batch(MIXED)
    out = model(ids, am, details=True)
    loss = out["logits"].square().mean() + out.get("density_penalty", 0.0)
    loss.backward()
    assert torch.isfinite(out["logits"]).all()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


# ----------------------------------------------------------------------------- C3, C4


@pytest.mark.parametrize("case", case_params("padding_invariance"))
def test_right_padding_leaves_real_logits_unchanged(case):
    model = _model(case)
    ids, am = token_batch(MIXED, TINY_MAX_SEQ, seed=1)  # padded far beyond the longest example
    padded = model(ids, am)
    for row, n in enumerate(MIXED):
        alone = model(ids[row : row + 1, :n], am[row : row + 1, :n])
        assert_close(_real_logits(case, padded["logits"], row, n),
                     _real_logits(case, alone["logits"], 0, n), case.tolerance())
        if case.is_gated:
            assert torch.equal(padded["gates"][row, :n], alone["gates"][0])
            assert not padded["gates"][row, n:].any()


@pytest.mark.parametrize("case", case_params("padding_invariance"))
def test_token_ids_at_padded_positions_are_ignored(case):
    model = _model(case)
    ids, am = token_batch(MIXED, seed=7)
    garbage = torch.where(am.bool(), ids, torch.randint_like(ids, 1, TINY_VOCAB))
    clean, dirty = model(ids, am), model(garbage, am)
    for row, n in enumerate(MIXED):
        assert_close(_real_logits(case, dirty["logits"], row, n),
                     _real_logits(case, clean["logits"], row, n), case.tolerance())
    if case.is_gated:
        assert torch.equal(dirty["gates"], clean["gates"])


@pytest.mark.parametrize("case", case_params("batch_independence"))
def test_an_example_does_not_depend_on_the_rest_of_its_batch(case):
    model = _model(case)
    ids, am = token_batch([6, 6, 2, 4], seed=2)
    others, others_mask = token_batch([3, 6, 5], 6, seed=3)
    first = model(ids, am)
    mixed_ids = torch.cat([ids[:1], others])
    mixed_am = torch.cat([am[:1], others_mask])
    second = model(mixed_ids, mixed_am)
    assert_close(_real_logits(case, second["logits"], 0, 6), _real_logits(case, first["logits"],
                                                                            0, 6), case.tolerance())
    if case.is_gated:
        assert torch.equal(first["gates"][0], second["gates"][0])


# ----------------------------------------------------------------------------- C5


@pytest.mark.parametrize("case", case_params("eval_determinism"))
def test_eval_is_bit_identical_and_leaves_the_rng_untouched(case):
    model = _model(case)
    ids, am = token_batch(MIXED, seed=4)
    before = torch.get_rng_state()
    first = model(ids, am, details=True)
    second = model(ids, am, details=True)
    assert torch.equal(torch.get_rng_state(), before)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


# ----------------------------------------------------------------------------- C6


@pytest.mark.parametrize("case", case_params("input_checks"))
def test_an_example_without_real_tokens_is_rejected(case):
    model = _model(case)
    ids, am = token_batch([4, 4, 4])
    am[1] = 0
    ids[1] = 0
    with pytest.raises(DataError, match=r"example\(s\) \[1\] have no real token"):
        model(ids, am)


@pytest.mark.parametrize("case", case_params("input_checks"))
def test_a_sequence_longer_than_max_seq_is_rejected(case):
    model = _model(case)
    ids, am = token_batch([TINY_MAX_SEQ + 1])
    with pytest.raises(DataError, match=f"exceeds the model's maximum of {TINY_MAX_SEQ}"):
        model(ids, am)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda ids, am: (ids[0], am[0]), r"must be \[batch, seq\]"),
        (lambda ids, am: (ids, am[:, :2]), "must have the same shape"),
        (lambda ids, am: (ids.float(), am), "integer tensors"),
        (lambda ids, am: (ids[:, :0], am[:, :0]), "empty request"),
        (lambda ids, am: (ids.clamp(max=TINY_VOCAB - 1) + TINY_VOCAB, am), "token ids must lie"),
        (lambda ids, am: (ids - 100, am), "token ids must lie"),
    ],
    ids=["1-d", "shape-mismatch", "float-ids", "empty", "id-too-large", "negative-id"],
)
def test_malformed_requests_are_rejected_with_a_data_error(make, message):
    model = _model(CASES[0])
    ids, am = token_batch([4, 3])
    with pytest.raises(DataError, match=message):
        model(*make(ids, am))


# ----------------------------------------------------------------------------- fp16


@pytest.mark.parametrize("case", case_params("fp16"))
def test_model_in_float16_stays_within_the_fp16_tolerance_of_float32(case):
    model = _model(case)
    ids, am = token_batch(MIXED, seed=5)
    reference = model(ids, am)
    half = model.half()(ids, am)
    if case.is_gated:  # these inputs keep every gate logit clear of 0: no gate may flip
        assert torch.equal(half["gates"], reference["gates"])
    assert half["logits"].dtype == torch.float16
    mask = am.bool()
    if case.head == "tagging":
        assert_close(half["logits"].float()[mask], reference["logits"][mask],
                     case.tolerance("float16"))
    else:
        assert_close(half["logits"].float(), reference["logits"], case.tolerance("float16"))
