"""What `train` says when GA-Net's held-out density misses its target
(`attndeploy.training.density.density_shortfall`)."""

from __future__ import annotations

from attndeploy.training.density import density_shortfall


def test_a_density_within_a_tenth_of_its_target_needs_no_word():
    assert density_shortfall({"density": 0.68, "density_target": 0.6}, {}) is None
    assert density_shortfall({"accuracy": 0.9}, {}) is None  # no gates, no target


def test_without_calibration_it_points_at_the_calibration():
    line = density_shortfall({"density": 0.13, "density_target": 0.6}, {})
    assert "0.130 misses its target 0.6" in line and "--density-calibrate" in line


def test_a_calibration_that_could_not_reach_the_target_says_the_scores_tie():
    summary = {"gate_calibration": {"density_after": 0.4, "on": "training"}}
    line = density_shortfall({"density": 0.41, "density_target": 0.6}, summary)
    assert "no gate threshold gives that density on the training texts" in line
    assert "0.400" in line


def test_a_calibration_that_reached_it_blames_the_held_out_texts():
    summary = {"gate_calibration": {"density_after": 0.6, "on": "validation"}}
    line = density_shortfall({"density": 0.85, "density_target": 0.6}, summary)
    assert "the validation texts reach 0.600" in line and "gate differently" in line
