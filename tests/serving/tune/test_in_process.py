"""The in-process reference on a real onnxruntime session: what it measured and the cores it
kept busy."""

from __future__ import annotations

import os

import pytest

from attndeploy.serving.tune.in_process import measure_in_process
from tests.serving.tune.fixtures import NAME, tiny_repo


@pytest.mark.parametrize("text", [True, False], ids=["texts", "ids"])
def test_the_reference_runs_batches_and_reports_the_cores_it_used(tmp_path, text):
    tiny_repo(tmp_path)
    point = measure_in_process(tmp_path / f"{NAME}.onnx", text=text, batch_size=2, seq=8,
                               threads=1, workers=2, seconds=0.3)
    assert point.batch_size == 2 and point.workers == 2 and point.threads == 1
    assert point.calls > 0 and point.throughput > 0
    # two busy workers: more than nothing, never more than the machine has
    assert 0 < point.cores <= (os.cpu_count() or 1) + 0.5
    assert point.to_dict()["cores"] == point.cores
