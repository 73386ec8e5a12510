"""`train_or_reuse` and `export_or_reuse`: the quickstart's public steps that the benchmarks share
(a checkpoint or an export already in place is reused, never redone)."""

from __future__ import annotations

import pytest

from attndeploy.checkpoint import save_checkpoint
from attndeploy.config import ModelConfig
from attndeploy.models import build_model
from attndeploy.quickstart.pipeline import QuickstartOptions, export_or_reuse, train_or_reuse

pytestmark = pytest.mark.usefixtures("torch_defaults")

TINY = dict(vocab_size=20, num_labels=2, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_seq=16,
            pool_hidden=4)


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    save_checkpoint(build_model(ModelConfig(**TINY)), path, label_names=("no", "yes"),
                    metrics={"accuracy": 0.75})
    return path


def test_a_checkpoint_that_loads_is_reused_with_its_metrics(checkpoint, tmp_path):
    logged: list[str] = []
    metrics, reused, seconds = train_or_reuse("standard", checkpoint,
                                              QuickstartOptions(workdir=tmp_path), logged.append)
    assert (metrics, reused, seconds) == ({"accuracy": 0.75}, True, None)
    assert logged == [f"standard: reusing checkpoint {checkpoint}"]


def test_an_export_is_made_once_and_then_reused_while_the_weights_match(checkpoint, tmp_path):
    onnx_path = tmp_path / "model.onnx"
    reused, seconds = export_or_reuse("standard", checkpoint, onnx_path, lambda _: None)
    assert reused is False and seconds > 0 and onnx_path.is_file()
    made = onnx_path.stat().st_mtime_ns
    assert export_or_reuse("standard", checkpoint, onnx_path, lambda _: None) == (True, None)
    assert onnx_path.stat().st_mtime_ns == made
    save_checkpoint(build_model(ModelConfig(**TINY, dropout=0.1)), checkpoint,
                    label_names=("no", "yes"), force=True)  # other weights (other init draw)
    assert export_or_reuse("standard", checkpoint, onnx_path, lambda _: None)[0] is False
