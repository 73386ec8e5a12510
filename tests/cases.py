"""THE table of variant cases: it drives the contract tests (models, checkpoints, export, serving).

One `VariantCase` per registered variant and per configuration of interest (QVI form, GA-Net
auxiliary network, model family, head). Each case carries

- a tiny `ModelConfig` factory (`case.config(...)`): small enough that a forward pass takes
  milliseconds on a CPU, with 3 layers so an evolving-attention chain has two EA layers;
- per-dtype tolerances (`case.tolerance("float32")`), with the comparison rule of
  docs/architecture.md (an element fails only if |a-b| > atol AND |a-b| > rtol·|b|);
- expected failures: a mapping from a check name to the reason, turned into strict xfail marks by
  `case_params(check)`, so that a check which starts passing is noticed.

Use it as

    @pytest.mark.parametrize("case", case_params("padding_invariance"))
    def test_...(case): ...

`tests/models/test_models.py::test_every_registered_variant_has_a_case` fails when a variant is
registered without a case here; add the case rather than skipping the guard.

Check names in use (add new ones freely, e.g. "onnx_parity"; a name that no case lists simply
has no xfail):
    "shapes", "train_forward", "padding_invariance", "batch_independence", "eval_determinism",
    "input_checks", "fp16" (tests/models/test_models.py), "checkpoint" (tests/test_checkpoint.py).
No case expects a failure at present (torch 2.13 CPU); record one here, with its reason, rather
than skipping inside a test. Shared comparison and input helpers live in `tests/helpers.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from attndeploy.config import EvolvingConfig, GANetConfig, ModelConfig, QVIConfig

# docs/architecture.md "Validation": the comparison defaults per dtype, (atol, rtol).
FP32_TOLERANCE = (1e-5, 1e-4)
FP16_TOLERANCE = (1e-2, 1e-2)

TINY_VOCAB = 50
TINY_LABELS = 3
TINY_MAX_SEQ = 16

# The tiny architecture shared by the transformer cases: d = 8 per head, 3 layers.
_TINY: dict[str, Any] = {
    "d_model": 16,
    "n_heads": 2,
    "n_layers": 3,
    "d_ff": 32,
    "max_seq": TINY_MAX_SEQ,
    "pool_hidden": 8,
    "lstm_hidden": 8,
}


@dataclass(frozen=True)
class VariantCase:
    """One row of the table: a named, tiny model configuration and what to expect of it."""

    id: str
    variant: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    tolerances: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: {"float32": FP32_TOLERANCE, "float16": FP16_TOLERANCE}
    )
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    def config(
        self, vocab_size: int = TINY_VOCAB, num_labels: int = TINY_LABELS, **changes: Any
    ) -> ModelConfig:
        """The case's tiny ModelConfig; `changes` override any field (e.g. head, max_seq)."""
        values = {**_TINY, "variant": self.variant, **self.overrides, **changes}
        return ModelConfig(vocab_size=vocab_size, num_labels=num_labels, **values)

    @property
    def family(self) -> str:
        return self.overrides.get("family", "transformer")

    @property
    def head(self) -> str:
        return self.overrides.get("head", "classification")

    @property
    def is_gated(self) -> bool:
        return self.variant == "ganet"

    def tolerance(self, dtype: str = "float32") -> tuple[float, float]:
        """(atol, rtol) for comparing this case's outputs in `dtype`."""
        return self.tolerances[dtype]

    def expected_failure(self, check: str) -> str | None:
        """The reason why `check` is expected to fail for this case, or None."""
        return self.expected_failures.get(check)


def _qvi(form: str, **kw: Any) -> dict[str, Any]:
    return {"qvi": QVIConfig(form=form, **kw)}


def _ganet(**kw: Any) -> dict[str, Any]:
    return {"ganet": GANetConfig(aux_hidden=8, **kw)}


CASES: tuple[VariantCase, ...] = (
    VariantCase("standard", "standard", description="vanilla attention (SDPA)"),
    VariantCase("qvi_pooled", "qvi", _qvi("pooled"), description="QVI pooled form"),
    VariantCase(
        "qvi_pairwise", "qvi", _qvi("pairwise", pairwise_chunk=3),
        description="QVI exact per-pair form, chunked in query blocks of 3 (not dividing T)",
    ),
    VariantCase("ganet_mlp", "ganet", _ganet(aux="mlp"), description="GA-Net, MLP gate network"),
    VariantCase("ganet_conv", "ganet", _ganet(aux="conv"), description="GA-Net, conv gate network"),
    VariantCase(
        "ganet_gather", "ganet", _ganet(aux="mlp", gather_open_keys=True),
        description="GA-Net evaluated by gathering the open keys",
    ),
    VariantCase(
        "ganet_bilstm_aux", "ganet", _ganet(aux="bilstm"),
        description="GA-Net transformer with the paper's BiLSTM gate network",
    ),
    VariantCase(
        "ganet_tagging", "ganet", {**_ganet(aux="mlp"), "head": "tagging"},
        description="GA-Net token tagger: gates reach the attention only (no gated pooling)",
    ),
    VariantCase(
        "bilstm_standard", "standard", {"family": "bilstm"},
        description="paper baseline: BiLSTM backbone with soft attention pooling",
    ),
    VariantCase(
        "ganet_bilstm_family", "ganet", {"family": "bilstm", **_ganet(aux="bilstm")},
        description="the paper-faithful GA-Net: BiLSTM backbone and BiLSTM gate network",
    ),
    VariantCase("evolving", "evolving", description="evolving attention, alpha 0.5, beta 1, ReLU"),
    VariantCase(
        "evolving_leaky", "evolving",
        {"evolving": EvolvingConfig(alpha=0.3, beta=0.5, negative_slope=0.01)},
        description="evolving attention with the time-series code's settings",
    ),
)

CASES_BY_ID: dict[str, VariantCase] = {case.id: case for case in CASES}


def select(predicate: Callable[[VariantCase], bool]) -> tuple[VariantCase, ...]:
    return tuple(case for case in CASES if predicate(case))


def case_params(
    check: str | None = None, cases: Iterable[VariantCase] = CASES
) -> list[Any]:
    """pytest params (id = case id); strict xfail where the case expects `check` to fail."""
    params = []
    for case in cases:
        reason = case.expected_failure(check) if check else None
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params
