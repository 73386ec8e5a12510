"""Parity statistics: one output of one runner against the reference, as data.

Rule (Polygraphy's elementwise check, docs/architecture.md "Validation"): an element fails only if
`|a - b| > atol` AND `|a - b| > rtol·|b|`, where `a` is the output under test and `b` the reference.
Any NaN or Inf in either array fails the output (the op contract promises finite outputs for
finite input); the statistics are computed over the elements that are finite in both.

Relative error is `|a - b| / |b|`; it is `inf` where `b == 0` and `a != b`, and 0 where both are 0.

Padded positions carry no meaning (docs/variants.md §1.2): for a family's per-token outputs (token
classification's logits) and for gates only the real tokens (`valid`) are compared. The family's
decision agreement (`attndeploy.validate.families`: label agreement per text, tag agreement per
real token; none for a family that takes no decision) is reported in `argmax_agreement` under
its name (`agreement`) but does not decide pass/fail: the tolerance rule does.

Gates (GA-Net) are discrete and must agree exactly. A flip is accepted only where the reference's
gate logit is within `flip_tolerance` of 0 (docs/variants.md §3.6: |s| < 1e-4 in fp32), because a
logit that close to the threshold may round either way. The comparison reports the flip count, the
smallest |s| among flips and the smallest |s| over all real tokens (the margin).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

GATE_FLIP_TOLERANCE = 1e-4  # docs/variants.md §3.6


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def to_json(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


# dtype recorded in the ONNX metadata -> default tolerance (docs/architecture.md)
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(1e-5, 1e-4),
    "float16": Tolerance(1e-2, 1e-2),
}


def check_tolerance_fields(options: Any,
                           names: tuple[str, ...] = ("atol", "rtol", "gate_flip_tolerance")
                           ) -> None:
    """ValidationError for a tolerance field of `options` below 0 (None means the default)."""
    from attndeploy.errors import ValidationError

    for name in names:
        value = getattr(options, name)
        if value is not None and not value >= 0:
            raise ValidationError(f"{name} must be >= 0, got {value}")


def default_tolerance(dtype: str) -> Tolerance:
    if dtype not in DEFAULT_TOLERANCES:
        raise KeyError(f"no default tolerance for dtype {dtype!r}")
    return DEFAULT_TOLERANCES[dtype]


@dataclass
class OutputComparison:
    """One output compared with the reference. Truthy when it passes.

    `kind` is "float" or "gates". Float outputs fill the error statistics; gates fill the flip
    fields. Statistics are None when nothing was compared (e.g. every element non-finite).
    """

    name: str
    kind: str
    passed: bool
    shape: tuple[int, ...]
    compared: int  # elements compared (real tokens only where a valid mask applies)
    failing: int  # elements that break the rule (float) or flips that are not accepted (gates)
    message: str = ""
    atol: float | None = None
    rtol: float | None = None
    max_abs: float | None = None
    mean_abs: float | None = None
    p99_abs: float | None = None
    max_rel: float | None = None
    mean_rel: float | None = None
    p99_rel: float | None = None
    nan_count: int = 0  # NaN in either array (counted per array, summed)
    inf_count: int = 0
    cosine: float | None = None
    min_atol: float | None = None  # smallest atol that passes at the given rtol
    min_rtol: float | None = None  # smallest rtol that passes at the given atol
    # the family's decision agreement: the fraction of decisions (texts, or real tokens) that
    # agree, the count that do not, and the statistic's name (`label agreement`); the fields
    # keep their first name, from when the decision was always the argmax
    argmax_agreement: float | None = None
    argmax_mismatches: int | None = None
    agreement: str | None = None
    flips: int | None = None
    accepted_flips: int | None = None
    flip_tolerance: float | None = None
    flip_margin: float | None = None  # smallest |gate logit| among flips
    margin: float | None = None  # smallest |gate logit| over all real tokens
    flipped_examples: tuple[int, ...] = ()
    abs_errors: np.ndarray | None = field(default=None, repr=False)  # for histograms

    def __bool__(self) -> bool:
        return self.passed

    def to_json(self) -> dict[str, Any]:
        keys = (
            "kind", "passed", "shape", "compared", "failing", "message", "atol", "rtol",
            "max_abs", "mean_abs", "p99_abs", "max_rel", "mean_rel", "p99_rel", "nan_count",
            "inf_count", "cosine", "min_atol", "min_rtol", "argmax_agreement", "argmax_mismatches",
            "agreement",
        )
        gate_keys = ("flips", "accepted_flips", "flip_tolerance", "flip_margin", "margin",
                     "flipped_examples")
        out = {key: getattr(self, key) for key in keys}
        if self.kind == "gates":
            out.update({key: getattr(self, key) for key in gate_keys})
        out["shape"] = list(self.shape)
        if self.kind == "gates":
            out["flipped_examples"] = list(self.flipped_examples)
        return out


@dataclass
class CompareResult:
    """Every output of one runner at one input shape. Truthy when every output passes."""

    outputs: dict[str, OutputComparison]
    excluded_examples: tuple[int, ...] = ()  # examples with only accepted gate flips

    @property
    def passed(self) -> bool:
        return all(self.outputs.values())

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failures(self) -> list[str]:
        return [name for name, result in self.outputs.items() if not result]


def relative_error(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|a - b| / |b| in float64; inf where b == 0 and a != b, 0 where both are 0."""
    a = actual.astype(np.float64)
    b = expected.astype(np.float64)
    diff = np.abs(a - b)
    denom = np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(denom > 0, denom, 1.0)
        rel = np.where(denom > 0, diff / safe, np.where(diff > 0, np.inf, 0.0))
    return rel


def cosine_similarity(actual: np.ndarray, expected: np.ndarray) -> float:
    """cos(a, b) over flattened arrays (float64); 1.0 when both are zero, 0.0 when one is."""
    a = actual.astype(np.float64).ravel()
    b = expected.astype(np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def _select(array: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Real tokens only: `valid` [B, T] selects along the first two axes ([N, ...])."""
    if valid is None:
        return array
    return array[valid.astype(bool)]


def compare_arrays(
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    tolerance: Tolerance,
    *,
    valid: np.ndarray | None = None,
    argmax: bool = False,
    examples: np.ndarray | None = None,
    agreement: Callable[[np.ndarray, np.ndarray], np.ndarray | None] | None = None,
    agreement_name: str = "argmax agreement",
) -> OutputComparison:
    """Compare a float output with the reference under the Polygraphy rule.

    valid:     bool [B, T] — compare only positions where it is True (a per-token output).
    agreement: (actual, expected) rows [N, C] -> bool [N], whether each decision agrees (a
               family's `agreement`), reported as `agreement_name`; None: none reported.
    argmax:    agreement is the argmax over the last axis (when `agreement` is not given).
    examples:  bool [B] — compare only these examples (others excluded, e.g. accepted gate flips).
    """
    if agreement is None and argmax:
        agreement = argmax_agreement
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    shape = tuple(int(d) for d in actual.shape)
    if actual.shape != expected.shape:
        return _shape_mismatch(name, "float", actual, expected,
                               atol=tolerance.atol, rtol=tolerance.rtol)
    if examples is not None:
        actual, expected = actual[examples], expected[examples]
        valid = None if valid is None else valid[examples]
    a = _select(actual, valid).astype(np.float64)
    b = _select(expected, valid).astype(np.float64)
    nan_count = int(np.isnan(a).sum() + np.isnan(b).sum())
    inf_count = int(np.isinf(a).sum() + np.isinf(b).sum())
    finite = np.isfinite(a) & np.isfinite(b)
    result = OutputComparison(
        name, "float", True, shape, int(a.size), 0, atol=tolerance.atol, rtol=tolerance.rtol,
        nan_count=nan_count, inf_count=inf_count,
    )
    if agreement is not None and a.ndim >= 1 and a.size:
        agree = agreement(a, b)
        if agree is not None:
            agree = np.asarray(agree, bool)
            result.argmax_agreement = float(agree.mean()) if agree.size else None
            result.argmax_mismatches = int((~agree).sum())
            result.agreement = agreement_name
    af, bf = a[finite], b[finite]
    if af.size:
        diff = np.abs(af - bf)
        rel = relative_error(af, bf)
        bad = (diff > tolerance.atol) & (diff > tolerance.rtol * np.abs(bf))
        result.failing = int(bad.sum())
        result.max_abs = float(diff.max())
        result.mean_abs = float(diff.mean())
        # "higher": an observed error (interpolating between inf values would give NaN)
        result.p99_abs = float(np.percentile(diff, 99, method="higher"))
        result.max_rel = float(rel.max())
        result.mean_rel = float(rel.mean())
        result.p99_rel = float(np.percentile(rel, 99, method="higher"))
        result.cosine = cosine_similarity(af, bf)
        beyond_rtol = diff > tolerance.rtol * np.abs(bf)
        result.min_atol = float(diff[beyond_rtol].max()) if beyond_rtol.any() else 0.0
        beyond_atol = diff > tolerance.atol
        result.min_rtol = float(rel[beyond_atol].max()) if beyond_atol.any() else 0.0
        result.abs_errors = diff.astype(np.float32)
    problems = []
    if result.failing:
        problems.append(
            f"{result.failing} of {result.compared} elements exceed atol {tolerance.atol:g} and "
            f"rtol {tolerance.rtol:g} (max abs {result.max_abs:.3g}, max rel {result.max_rel:.3g})"
        )
    if nan_count or inf_count:
        problems.append(f"{nan_count} NaN and {inf_count} Inf values (either array)")
    result.passed = not problems
    result.message = "; ".join(problems)
    return result


def argmax_agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: each row's argmax over the last axis is the reference's (the agreement of a
    family whose decision is a label, and of callers that name no family)."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)


def compare_gates(
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    gate_logits: np.ndarray | None,
    *,
    valid: np.ndarray | None = None,
    flip_tolerance: float = GATE_FLIP_TOLERANCE,
) -> OutputComparison:
    """Exact comparison of bool gates [B, T] on real tokens, with flips and margins.

    A flip passes only where the reference gate logit has |s| < flip_tolerance; without
    `gate_logits` every flip fails.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    shape = tuple(int(d) for d in actual.shape)
    if actual.shape != expected.shape:
        return _shape_mismatch(name, "gates", actual, expected,
                               flips=None, flip_tolerance=flip_tolerance)
    a = actual.astype(bool)
    b = expected.astype(bool)
    real = np.ones(a.shape, bool) if valid is None else valid.astype(bool)
    flipped = (a != b) & real
    flips = int(flipped.sum())
    logits = None if gate_logits is None else np.abs(np.asarray(gate_logits, np.float64))
    if logits is not None and logits.shape != a.shape:
        logits = None
    if logits is None:
        accepted = np.zeros_like(flipped)
        margin = flip_margin = None
    else:
        accepted = flipped & (logits < flip_tolerance)
        real_logits = logits[real]
        margin = float(real_logits.min()) if real_logits.size else None
        flip_margin = float(logits[flipped].min()) if flips else None
    refused = int((flipped & ~accepted).sum())
    flipped_examples = tuple(int(i) for i in np.flatnonzero(flipped.any(axis=-1)))
    result = OutputComparison(
        name, "gates", refused == 0, shape, int(real.sum()), refused,
        flips=flips, accepted_flips=int(accepted.sum()), flip_tolerance=flip_tolerance,
        flip_margin=flip_margin, margin=margin, flipped_examples=flipped_examples,
    )
    if refused:
        where = (
            "" if flip_margin is None
            else f"; smallest |gate logit| among flips {flip_margin:.3g}"
        )
        result.message = (
            f"{flips} gate flip(s) on real tokens, {refused} where |gate logit| >= "
            f"{flip_tolerance:g}{where}"
        )
    elif flips:
        result.message = f"{flips} accepted flip(s) with |gate logit| < {flip_tolerance:g}"
    return result


def compare_outputs(
    actual: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    tolerances: Mapping[str, Tolerance] | Tolerance,
    *,
    valid: np.ndarray | None = None,
    tagging: bool = False,
    gate_logits: np.ndarray | None = None,
    flip_tolerance: float = GATE_FLIP_TOLERANCE,
    outputs: tuple[str, ...] | None = None,
    checks: FamilyChecksLike | None = None,
) -> CompareResult:
    """Compare every model-level output; gates first (docs/variants.md §3.6).

    `tolerances`: one Tolerance, or {output name: Tolerance} with the key "*" as the default.
    `outputs` names what to compare (default: every output of `expected` except `gate_logits`,
    which only the PyTorch reference produces). An output missing from `actual` fails.
    `checks`: the model family's checks part (`attndeploy.validate.families.family_checks`):
    which outputs are compared on the real tokens `valid` only, and the decision agreement
    reported. Without it, the outputs are a classifier's (`tagging=True`: a tagger's, its
    `logits` per token) and the agreement is the argmax of `logits`.
    When every gate flip is an accepted one, the examples with flips are left out of the float
    comparisons (`excluded_examples`): a gate that legitimately decided the other way changes
    that example's logits. With any refused flip nothing is left out.
    """
    names = outputs or tuple(n for n in expected if n != "gate_logits")
    per_token_names = per_token_outputs(checks, tagging)
    decision_output = checks.decision_output if checks is not None else "logits"

    def tolerance_of(name: str) -> Tolerance:
        if isinstance(tolerances, Tolerance):
            return tolerances
        return tolerances.get(name) or tolerances["*"]

    results: dict[str, OutputComparison] = {}
    excluded: tuple[int, ...] = ()
    if "gates" in names:
        if "gates" not in actual:
            results["gates"] = _missing("gates", "gates")
        else:
            gates = compare_gates(
                "gates", actual["gates"], expected["gates"], gate_logits,
                valid=valid, flip_tolerance=flip_tolerance,
            )
            results["gates"] = gates
            if gates.passed and gates.flips:
                excluded = gates.flipped_examples
    batch = next(iter(expected.values())).shape[0] if expected else 0
    keep = None
    if excluded:
        keep = np.ones(batch, bool)
        keep[list(excluded)] = False
    for name in names:
        if name == "gates":
            continue
        if name not in actual:
            results[name] = _missing(name, "float")
            continue
        exp = np.asarray(expected[name])
        per_token = (name in per_token_names and valid is not None
                     and exp.shape[:2] == np.shape(valid))  # [B, T, ...]
        decides = name == decision_output
        results[name] = compare_arrays(
            name, actual[name], exp, tolerance_of(name),
            valid=valid if per_token else None,
            examples=keep,
            agreement=(checks.agreement if checks is not None else argmax_agreement)
            if decides else None,
            agreement_name=checks.agreement_name if checks is not None else "argmax agreement",
        )
    ordered = {name: results[name] for name in names if name in results}
    return CompareResult(ordered, excluded)


class FamilyChecksLike(Protocol):
    """What `compare_outputs` reads of a family's checks part
    (`attndeploy.validate.families.FamilyChecks`)."""

    per_token_outputs: tuple[str, ...]
    decision_output: str
    agreement_name: str

    def agreement(self, actual: np.ndarray, expected: np.ndarray) -> np.ndarray | None: ...


def per_token_outputs(checks: FamilyChecksLike | None, tagging: bool) -> Collection[str]:
    """The outputs compared on real tokens only: the family's, else a tagger's `logits`."""
    if checks is not None:
        return checks.per_token_outputs
    return ("logits",) if tagging else ()


def _shape_mismatch(name: str, kind: str, actual: np.ndarray, expected: np.ndarray,
                    **fields: Any) -> OutputComparison:
    return OutputComparison(
        name, kind, False, tuple(int(d) for d in actual.shape), 0, 0,
        message=f"shape {list(actual.shape)} differs from the reference's {list(expected.shape)}",
        **fields,
    )


def _missing(name: str, kind: str) -> OutputComparison:
    return OutputComparison(name, kind, False, (), 0, 0, message="output missing from the runner")


def json_float(value: Any) -> Any:
    """JSON has no inf/nan: non-finite floats become the strings "inf", "-inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
