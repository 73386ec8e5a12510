"""benchmarks/fashion_mnist.py writes the IDX files as train/ and test/ class folders that
`load_training_images` reads back; without IDX files it fails in one line and writes nothing."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from attndeploy.data.images import load_training_images
from tests.benchmark_scripts import load_benchmark


def _script():
    return load_benchmark("fashion_mnist")


def _write_idx(folder: Path, prefix: str, pixels: np.ndarray, labels: np.ndarray) -> None:
    head = (0x803).to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in pixels.shape)
    with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as file:
        file.write(head + pixels.tobytes())
    with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as file:
        file.write((0x801).to_bytes(4, "big") + len(labels).to_bytes(4, "big") + labels.tobytes())


def test_idx_files_become_a_train_test_image_folder(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for prefix, count in (("train", 20), ("t10k", 10)):
        _write_idx(tmp_path, prefix, rng.integers(0, 256, (count, 6, 6)).astype(np.uint8),
                   (np.arange(count) % 10).astype(np.uint8))
    out = tmp_path / "fm"
    assert _script().main(["--idx-dir", str(tmp_path), "--out", str(out), "--limit", "15"]) == 0
    train, test = load_training_images(out, eval_fraction=0.1, seed=0)
    assert (len(train), len(test)) == (15, 10)
    assert len(train.class_names) == 10 and train.pixels.shape[1:] == (1, 6, 6)
    assert "train: 15 images" in capsys.readouterr().out


def test_no_idx_files_is_one_error_line_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "fm"
    assert _script().main(["--idx-dir", str(tmp_path), "--out", str(out)]) == 2
    assert "no Fashion-MNIST IDX files" in capsys.readouterr().err
    assert not out.exists()
