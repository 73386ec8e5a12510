"""The parity statistics on hand-made arrays: every number is computed here by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndeploy.validate.compare import (
    Tolerance,
    compare_arrays,
    compare_gates,
    compare_outputs,
    cosine_similarity,
    default_tolerance,
    json_float,
    relative_error,
)

F32 = Tolerance(1e-5, 1e-4)


def test_an_element_within_rtol_but_beyond_atol_passes():
    expected = np.array([100.0, 200.0], np.float32)
    actual = np.array([100.001, 200.0], np.float32)  # diff ~1e-3 > atol, < rtol * 100 = 1e-2
    assert compare_arrays("logits", actual, expected, Tolerance(1e-5, 1e-4 * 100))
    strict = compare_arrays("logits", actual, expected, Tolerance(1e-5, 1e-6))
    assert not strict
    assert strict.failing == 1


def test_an_element_within_atol_but_beyond_rtol_passes():
    expected = np.array([0.0, 1.0])
    actual = np.array([1e-6, 1.0])  # relative error inf, absolute 1e-6 <= atol
    result = compare_arrays("logits", actual, expected, F32)
    assert result
    assert result.max_rel == math.inf
    assert not compare_arrays("logits", actual, expected, Tolerance(1e-7, 1e-4))


def test_statistics_match_hand_computation():
    expected = np.array([1.0, 2.0, 3.5, 2.0])
    actual = np.array([1.0, 2.0, 3.0, 4.0])
    tol = Tolerance(0.1, 0.1)
    result = compare_arrays("logits", actual, expected, tol)
    diff = np.array([0.0, 0.0, 0.5, 2.0])
    rel = np.array([0.0, 0.0, 0.5 / 3.5, 1.0])
    assert result.max_abs == pytest.approx(2.0)
    assert result.mean_abs == pytest.approx(0.625)
    assert result.p99_abs == pytest.approx(np.percentile(diff, 99, method="higher"))
    assert result.max_rel == pytest.approx(1.0)
    assert result.mean_rel == pytest.approx(rel.mean())
    assert result.p99_rel == pytest.approx(np.percentile(rel, 99, method="higher"))
    cos = np.dot(actual, expected) / (np.linalg.norm(actual) * np.linalg.norm(expected))
    assert result.cosine == pytest.approx(cos)
    # both bad elements are beyond rtol·|b| (0.35 and 0.2): atol must cover the larger diff
    assert result.min_atol == pytest.approx(2.0)
    # both are beyond atol 0.1: rtol must cover the larger relative error
    assert result.min_rtol == pytest.approx(1.0)
    assert result.failing == 2 and result.compared == 4 and not result
    # the minimum tolerances are exactly sufficient
    assert compare_arrays("logits", actual, expected, Tolerance(result.min_atol, 0.1))
    assert not compare_arrays("logits", actual, expected, Tolerance(1.99, 0.1))
    assert compare_arrays("logits", actual, expected, Tolerance(0.1, result.min_rtol))
    assert not compare_arrays("logits", actual, expected, Tolerance(0.1, 0.99))


def test_an_exact_match_needs_no_tolerance():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = compare_arrays("logits", x, x.copy(), Tolerance(0.0, 0.0))
    assert result and result.max_abs == 0.0 and result.min_atol == 0.0 and result.min_rtol == 0.0
    assert result.cosine == pytest.approx(1.0)


def test_nan_and_inf_are_counted_in_either_array_and_fail():
    expected = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    actual = np.array([1.0, 2.0, np.inf, np.nan], np.float32)
    result = compare_arrays("logits", actual, expected, Tolerance(10.0, 10.0))
    assert result.nan_count == 2
    assert result.inf_count == 1
    assert not result
    assert "NaN" in result.message
    # the finite pair (1, 1) is still summarised
    assert result.max_abs == 0.0


def test_argmax_agreement_per_example():
    expected = np.array([[0.0, 1.0, 0.5], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.1, 0.0]])
    actual = expected.copy()
    actual[3] = [1.2, 1.1, 0.0]  # example 3 now prefers label 0
    result = compare_arrays("logits", actual, expected, F32, argmax=True)
    assert result.argmax_agreement == pytest.approx(0.75)
    assert result.argmax_mismatches == 1


def test_tagging_logits_compare_real_tokens_only():
    rng = np.random.default_rng(0)
    expected = rng.normal(size=(2, 4, 3)).astype(np.float32)  # [B, T, C]
    valid = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    actual = expected.copy()
    actual[1, 2:] += 100.0  # garbage at padded positions carries no meaning
    res = compare_outputs({"logits": actual}, {"logits": expected}, F32, valid=valid,
                          tagging=True)
    assert res
    assert res.outputs["logits"].compared == 6 * 3
    actual[0, 1, np.argmin(expected[0, 1])] += 100.0  # a real token's argmax changes
    res = compare_outputs({"logits": actual}, {"logits": expected}, F32, valid=valid,
                          tagging=True)
    out = res.outputs["logits"]
    assert not res and res.failures == ["logits"]
    assert out.argmax_mismatches == 1
    assert out.argmax_agreement == pytest.approx(5 / 6)


def test_gate_flips_are_counted_with_their_margin():
    expected = np.array([[True, False, True, False], [False, True, False, False]])
    logits = np.array([[0.9, -0.3, 0.2, -0.05], [-0.7, 0.4, -2.0, 5.0]], np.float32)
    valid = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    actual = expected.copy()
    actual[0, 1] = True  # |s| = 0.3
    actual[1, 2] = True  # |s| = 2.0
    actual[1, 3] = True  # a pad: ignored
    result = compare_gates("gates", actual, expected, logits, valid=valid)
    assert not result
    assert result.flips == 2
    assert result.accepted_flips == 0
    assert result.failing == 2
    assert result.flip_margin == pytest.approx(0.3)
    assert result.margin == pytest.approx(0.05)  # smallest |s| over real tokens
    assert result.flipped_examples == (0, 1)
    assert result.compared == 7
    assert "2 gate flip" in result.message


def test_gate_flip_at_a_logit_within_tolerance_of_zero_is_accepted():
    expected = np.array([[True, False], [True, False]])
    logits = np.array([[1.0, -5e-5], [1.0, -0.5]], np.float32)
    actual = np.array([[True, True], [True, False]])
    assert compare_gates("gates", actual, expected, logits, flip_tolerance=1e-4)
    # the same flip is refused at a tighter tolerance, and without the logits at all
    assert not compare_gates("gates", actual, expected, logits, flip_tolerance=1e-5)
    assert not compare_gates("gates", actual, expected, None)


def test_an_accepted_flip_leaves_its_example_out_of_the_logits_comparison():
    gates = np.array([[True, False], [True, True]])
    logits_s = np.array([[1.0, -5e-5], [1.0, 2.0]], np.float32)
    expected = {"logits": np.array([[0.0, 1.0], [1.0, 0.0]], np.float32), "gates": gates,
                "gate_logits": logits_s}
    flipped = gates.copy()
    flipped[0, 1] = True
    actual = {"logits": np.array([[5.0, 1.0], [1.0, 0.0]], np.float32), "gates": flipped}
    res = compare_outputs(actual, expected, F32, gate_logits=logits_s)
    assert res
    assert res.excluded_examples == (0,)
    assert res.outputs["logits"].compared == 2  # example 1 only
    assert list(res.outputs) == ["logits", "gates"]
    # an unflipped example that differs still fails
    actual["logits"][1, 0] = 3.0
    assert compare_outputs(actual, expected, F32, gate_logits=logits_s).failures == ["logits"]


def test_per_output_tolerance_overrides_the_default():
    expected = {"logits": np.array([1.0, 2.0]), "aux": np.array([1.0, 2.0])}
    actual = {"logits": np.array([1.0, 2.0]), "aux": np.array([1.5, 2.0])}
    tolerances = {"*": F32, "aux": Tolerance(1.0, 0.0)}
    assert compare_outputs(actual, expected, tolerances)
    assert compare_outputs(actual, expected, F32).failures == ["aux"]


def test_shape_mismatch_and_missing_output_fail():
    expected = {"logits": np.zeros((2, 3)), "gates": np.zeros((2, 4), bool)}
    res = compare_outputs({"logits": np.zeros((2, 4))}, expected, F32)
    assert set(res.failures) == {"logits", "gates"}
    assert "shape" in res.outputs["logits"].message
    assert "missing" in res.outputs["gates"].message


def test_relative_error_and_cosine_edge_cases():
    rel = relative_error(np.array([0.0, 1.0, 3.0]), np.array([0.0, 0.0, 2.0]))
    assert rel.tolist() == [0.0, math.inf, 0.5]
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine_similarity(np.zeros(3), np.ones(3)) == 0.0
    assert cosine_similarity(np.array([1.0, 0.0]), np.array([-1.0, 0.0])) == -1.0


def test_default_tolerances_by_dtype_and_json_floats():
    assert default_tolerance("float32") == Tolerance(1e-5, 1e-4)
    assert default_tolerance("float16") == Tolerance(1e-2, 1e-2)
    with pytest.raises(KeyError):
        default_tolerance("bfloat16")
    assert [json_float(x) for x in (math.inf, -math.inf, math.nan, 1.5)] == [
        "inf", "-inf", "nan", 1.5,
    ]


def test_a_shape_that_differs_from_the_reference_fails_and_says_both_shapes():
    logits = compare_arrays("logits", np.zeros((2, 3)), np.zeros((2, 4)), F32)
    assert not logits and logits.kind == "float" and logits.shape == (2, 3)
    assert logits.message == "shape [2, 3] differs from the reference's [2, 4]"
    assert (logits.atol, logits.rtol) == (F32.atol, F32.rtol)
    gates = compare_gates("gates", np.zeros((1, 5), bool), np.zeros((2, 5), bool), None)
    assert not gates and gates.kind == "gates" and gates.flips is None
    assert gates.message == "shape [1, 5] differs from the reference's [2, 5]"
