"""`AttnModel.eval_gates`: the gates eval mode applies, computed in either mode (the density
controller reads them in training)."""

from __future__ import annotations

import pytest
import torch

from attndeploy.errors import ConfigError
from attndeploy.models import build_model
from tests.cases import CASES, case_params
from tests.helpers import token_batch

pytestmark = pytest.mark.usefixtures("torch_defaults")


@pytest.mark.parametrize("case", case_params("shapes", [c for c in CASES if c.is_gated]))
def test_eval_gates_are_the_gates_eval_mode_applies_even_in_training_mode(case):
    model = build_model(case.config()).eval()
    ids, am = token_batch([7, 3, 1, 5])
    applied = model(ids, am)["gates"]  # [B, T]
    model.train()  # noise, relaxation and dropout in the forward pass; none in eval_gates
    assert torch.equal(model.eval_gates(ids, am), applied)
    assert not model.eval_gates(ids, am)[am == 0].any()  # pads never open


def test_a_model_without_gates_refuses():
    case = next(c for c in CASES if c.variant == "standard")
    ids, am = token_batch([3])
    with pytest.raises(ConfigError, match="no gates"):
        build_model(case.config()).eval_gates(ids, am)
