"""The quickstart (attndeploy/quickstart/pipeline.py), end to end with a real tritonserver: every
variant trained, exported, validated, packaged, served and load-tested; one report whose every
picture exists; a second run reuses the checkpoints and the ONNX files.

Few training steps and short load-test windows keep it inside CI time; the default run is
`make quickstart`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.image import imread

from attndeploy.quickstart.pipeline import VARIANTS, QuickstartOptions, run_quickstart
from attndeploy.variants import variant_spec

pytestmark = pytest.mark.integration


def options(tmp_path: Path, **overrides: Any) -> QuickstartOptions:
    settings: dict[str, Any] = {
        "workdir": tmp_path / "quickstart", "repo": tmp_path / "model_repository", "steps": 30,
        "concurrency": (1, 4), "load_window_s": 0.5, "load_max_windows": 3,
    }
    return QuickstartOptions(**{**settings, **overrides})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("quickstart")
    return tmp_path, run_quickstart(options(tmp_path), log=lambda _: None, progress=False)


def test_every_stage_passes_for_every_variant(first_run):
    _, data = first_run
    assert data["passed"] is True
    assert [v["variant"] for v in data["variants"]] == list(VARIANTS)
    for variant in data["variants"]:
        assert variant["validation_passed"] is True and variant["loadtest_passed"] is True
        assert variant["served_model"] == f"{variant['variant']}_python"
        assert variant["text_model"] == f"{variant['variant']}_text"
        assert not variant["reused_checkpoint"] and not variant["reused_export"]
    assert set(data["timings_s"]) >= {"train", "export", "validate", "package",
                                      "serve_and_loadtest", "report", "total"}


def test_the_repository_holds_both_flavours_and_the_text_model_of_every_variant(first_run):
    tmp_path, _ = first_run
    repo = tmp_path / "model_repository"
    assert sorted(p.name for p in repo.iterdir()) == sorted(
        f"{v}_{kind}" for v in VARIANTS for kind in ("python", "onnxruntime", "text"))
    # ... but the local tritonserver serves only the python flavour, and the report says so
    report = " ".join((tmp_path / "quickstart" / "report.md").read_text().split())
    assert "its python flavour served by a local `tritonserver`" in report
    assert "onnxruntime flavour runs in NGC's Triton image" in report


def test_the_report_shows_one_text_request_and_response_per_variant(first_run):
    tmp_path, data = first_run
    report = (tmp_path / "quickstart" / "report.md").read_text()
    for variant in data["variants"]:
        example = variant["text_example"]
        name = f"{variant['variant']}_text"
        assert example["path"] == f"/v2/models/{name}/infer"
        (text_input,) = example["request"]["inputs"]
        assert text_input["name"] == "text" and text_input["datatype"] == "BYTES"
        outputs = {o["name"]: o for o in example["response"]["outputs"]}
        assert outputs["label"]["data"] == [example["label"]]
        for name in ("logits", "probabilities"):
            assert outputs[name]["datatype"] == "FP32"
            assert len(outputs[name]["data"]) == outputs[name]["shape"][1] >= 2
        assert sum(outputs["probabilities"]["data"]) == pytest.approx(1.0, abs=1e-5)
        assert ("attended" in outputs) == (variant["variant"] == "ganet")
        assert f"POST {example['path']}" in report
        assert json.dumps(example["request"]) in report
        assert json.dumps(example["response"]) in report


def test_the_report_links_only_pictures_that_exist_and_read_back(first_run):
    tmp_path, data = first_run
    work = tmp_path / "quickstart"
    report = (work / "report.md").read_text()
    assert json.loads((work / "report.json").read_text())["variants"] == data["variants"]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)
    # parity per variant, GA-Net gates, Evolving maps, latency-throughput curves
    assert len(links) >= len(VARIANTS) + 3, links
    for link in links:
        assert imread(work / link).size > 0, link
    for variant in VARIANTS:
        assert f"| {variant} |" in report
    # Each variant's figures are the ones its spec asks for, under its title.
    files = {Path(link).name for link in links}
    for variant in VARIANTS:
        spec = variant_spec(variant)
        if "gates" in spec.figures:
            assert f"{variant}_gates.png" in files
            assert f"## {spec.title}: which tokens the model attends to" in report
        if "layer_maps" in spec.figures:
            assert f"{variant}_maps.png" in files


def test_a_second_run_reuses_checkpoints_and_exports(first_run):
    tmp_path, data = first_run
    again = run_quickstart(options(tmp_path, serve=False), log=lambda _: None, progress=False)
    for before, after in zip(data["variants"], again["variants"], strict=True):
        assert after["reused_checkpoint"] and after["reused_export"]
        assert after["metrics"] == before["metrics"]
        assert after["validation_passed"] is True
