"""benchmarks/translation.py's load-independent budget on tiny pairs: `--calibrate` times a
variant's step (epochs refilled, QVI's cross form recorded), `--quiet-seconds` turns the timing
into that many steps with no time cap, and a QVI timing of another cross form is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark
from tests.families.translation.test_cli import PAIRS

# the script sets torch's thread count: the fixture puts it back for the tests after these
pytestmark = pytest.mark.usefixtures("torch_defaults")


@pytest.fixture(scope="module")
def script():
    return load_benchmark("translation")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in PAIRS))
    return path


def test_calibrate_times_steps_past_an_epoch_and_records_the_cross_form(script, data, tmp_path):
    # ~53 training pairs at batch 8 are 7 batches: 20 warm-up + 3 timed steps span epochs
    assert script.main(["--data", str(data), "--variants", "qvi", "--calibrate",
                        "--calibrate-steps", "3", "--batch-size", "8", "--vocab", "200",
                        "--out", str(tmp_path)]) == 0
    timing = json.loads((tmp_path / "translation_calibration_qvi.json").read_text())
    assert timing["seconds_per_step"] > 0 and timing["steps_timed"] == 3
    assert timing["config"]["qvi_cross_form"] == "pooled"


def test_quiet_seconds_train_the_calibrated_steps_with_no_time_cap(script, data, tmp_path):
    calibration = tmp_path / "cal"
    calibration.mkdir()
    (calibration / "translation_calibration_standard.json").write_text(
        json.dumps({"variant": "standard", "seconds_per_step": 0.5}))
    assert script.main(["--data", str(data), "--variants", "standard", "--quiet-seconds", "2",
                        "--calibration", str(calibration), "--batch-size", "8",
                        "--vocab", "200", "--max-seconds", "0.001",
                        "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "translation_standard_s0.json").read_text())
    assert record["budget"] == {"quiet_seconds": 2.0, "steps": 4}
    assert record["summary"]["steps"] == 4  # --max-seconds does not cut a step budget
    # the teacher-forced losses of the held-out pairs and of as many training pairs
    assert record["metrics"]["held_out_loss"] > 0 and record["metrics"]["train_pairs_loss"] > 0
    assert (tmp_path / "translation.json").is_file() and (tmp_path / "translation.png").is_file()


def test_a_qvi_timing_of_another_cross_form_is_refused(script, data, tmp_path, capsys):
    (tmp_path / "translation_calibration_qvi.json").write_text(
        json.dumps({"variant": "qvi", "seconds_per_step": 0.2}))  # no config: pairwise
    with pytest.raises(SystemExit) as stopped:
        script.main(["--data", str(data), "--variants", "qvi", "--quiet-seconds", "2",
                     "--calibration", str(tmp_path), "--out", str(tmp_path)])
    assert stopped.value.code == 2
    assert "calibrate it again" in capsys.readouterr().err
    assert not (tmp_path / "translation_qvi_s0.json").exists()
