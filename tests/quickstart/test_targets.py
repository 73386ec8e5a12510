"""The quickstart report's notes against its own targets: the stated steps or what stopped
training, GA-Net's density against its ceiling, and the baseline (a tie at 1.0 explained)."""

from __future__ import annotations

from types import SimpleNamespace

from attndeploy.quickstart.targets import target_notes, training_summary


def test_a_time_cap_that_cut_training_short_is_named_with_the_way_out() -> None:
    capped = {"steps_done": 137, "horizon_steps": 300, "stopped_by": "time", "max_seconds": 60.0}
    (note,) = target_notes({}, capped)
    assert note.startswith("trained 137 of its 300 steps: the 60 s cap (--max-train-seconds)")
    full = {"steps_done": 300, "horizon_steps": 300, "stopped_by": "steps"}
    assert target_notes({}, full) == ["trained its 300 of 300 steps (stopped by steps)"]


def test_the_density_target_is_a_ceiling_and_a_miss_says_by_how_much() -> None:
    (within,) = target_notes({"density": 0.073, "density_target": 0.3}, {})
    assert within.startswith("gate density 0.073, within its target of at most 0.3")
    (above,) = target_notes({"density": 0.41, "density_target": 0.3}, {})
    assert above == "gate density 0.410 misses its target of at most 0.3 by 0.110"


def test_a_tie_with_the_baseline_at_perfect_accuracy_is_explained_not_flagged() -> None:
    (solved,) = target_notes({"accuracy": 1.0, "baseline_accuracy": 1.0}, {})
    assert "solved by both" in solved and "not" not in solved.split(":")[0]
    (behind,) = target_notes({"accuracy": 0.9, "baseline_accuracy": 0.95}, {})
    assert behind.startswith("held-out accuracy 0.9000 does not beat the bag-of-words "
                             "baseline's 0.9500: ")
    assert "a miss of 0.0500 says little about attention" in behind  # every miss explained


def test_the_summary_is_read_from_the_checkpoint_s_training_notes() -> None:
    checkpoint = SimpleNamespace(metadata={"training": {
        "steps_done": 53, "horizon_steps": 300, "stopped_by": "time", "seconds": 60.1,
        "best_step": 50, "config": {"max_seconds": 60.0}}})
    assert training_summary(checkpoint) == {"steps_done": 53, "horizon_steps": 300,
                                            "stopped_by": "time", "seconds": 60.1,
                                            "max_seconds": 60.0}
    assert training_summary(SimpleNamespace(metadata={})) == {}
