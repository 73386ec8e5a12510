"""`attndeploy.debug.report`: the result as data, its verdict, JSON and plot."""

from __future__ import annotations

import json

import pytest

from attndeploy.debug import compare_checkpoint
from attndeploy.debug.report import SCHEMA, short

pytestmark = pytest.mark.usefixtures("torch_defaults")


@pytest.mark.parametrize(("value", "text"), [
    (0.041, "4.1e-2"), (1e-5, "1e-5"), (1.9, "1.9"), (0.0, "0"), (12.0, "1.2e1"),
    (float("inf"), "inf"), (None, "n/a"),
])
def test_numbers_read_in_two_significant_digits(value, text):
    assert short(value) == text


def test_the_report_writes_json_and_a_log_scale_plot(models, tmp_path):
    exported = models.get("evolving")
    report = compare_checkpoint(exported.checkpoint, exported.path)
    data = json.loads(report.write_json(tmp_path / "r.json").read_text())
    assert data["schema"] == SCHEMA and data["passed"] is True
    assert data["verdict"] == report.verdict and data["first_divergence"] is None
    assert [layer["label"] for layer in data["layers"]] == [l.label for l in report.layers]
    assert {"max_abs", "rel_error", "added_error", "nodes", "values"} <= set(data["layers"][0])
    assert report.verdict.endswith("(3 attention nodes, 3 blocks, 1 output)")
    png = report.write_plot(tmp_path / "r.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.png"]  # no temporaries
