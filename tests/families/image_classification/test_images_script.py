"""benchmarks/images.py on a tiny image folder: a run per model and seed, then images.json with
the seeds' means and each target judged (EA against standard with its 0.2-point margin), and
the picture; an unknown variant is refused before anything trains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_scripts import load_benchmark
from tests.families.image_classification.test_fashion_mnist_script import _script as fm_script
from tests.families.image_classification.test_fashion_mnist_script import _write_idx

# the script sets torch's thread count: the fixture puts it back for the tests after these
pytestmark = pytest.mark.usefixtures("torch_defaults")


@pytest.fixture(scope="module")
def script():
    return load_benchmark("images")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    idx = tmp_path_factory.mktemp("idx")
    rng = np.random.default_rng(0)
    for prefix, count in (("train", 60), ("t10k", 20)):
        _write_idx(idx, prefix, rng.integers(0, 256, (count, 28, 28)).astype(np.uint8),
                   (np.arange(count) % 10).astype(np.uint8))
    out = idx / "fm"
    assert fm_script().main(["--idx-dir", str(idx), "--out", str(out)]) == 0
    return out


def test_each_model_and_seed_is_a_run_and_the_summary_judges_the_targets(
        script, folder, tmp_path):
    assert script.main(["--data", str(folder), "--architectures", "vit",
                        "--variants", "standard,none", "--seeds", "0,1", "--steps", "2",
                        "--batch-size", "8", "--out", str(tmp_path)]) == 0
    for variant in ("standard", "none"):
        for seed in (0, 1):
            record = json.loads((tmp_path / f"images_vit_{variant}_s{seed}.json").read_text())
            assert 0.0 <= record["metrics"]["accuracy"] <= 1.0
            assert record["summary"]["steps"] == 2 and record["wall_minutes"] >= 0
    report = json.loads((tmp_path / "images.json").read_text())
    assert len(report["runs"]) == 4
    standard = report["models"]["vit/standard"]
    assert standard["mean"] == pytest.approx(np.mean(list(standard["seeds"].values())), abs=1e-4)
    assert set(report["targets"]) == {"vit/standard >= 0.88", "vit/standard > logistic",
                                      "vit/none > logistic", "every run <= 20 minutes"}
    assert (tmp_path / "images.png").stat().st_size > 0


def _record(arch: str, variant: str, seed: int, accuracy: float) -> dict:
    return {"architecture": arch, "variant": variant, "seed": seed, "wall_minutes": 1.0,
            "metrics": {"accuracy": accuracy, "baseline_accuracy": 0.84}}


@pytest.mark.parametrize(("evolving", "met"), [((0.898, 0.900), True), ((0.896, 0.898), False)])
def test_evolving_attention_may_trail_standard_by_two_tenths_of_a_point(script, evolving, met):
    runs = [_record("vit", "standard", 0, 0.900), _record("vit", "standard", 1, 0.900),
            _record("vit", "evolving", 0, evolving[0]), _record("vit", "evolving", 1, evolving[1])]
    assert script.summarise(runs)["targets"]["vit: evolving >= standard - 0.2 points"] is met


def test_an_unknown_variant_is_refused_before_any_training(script, folder, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        script.main(["--data", str(folder), "--variants", "standard,mamba",
                     "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2
    assert "unknown architecture or variant: mamba" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
