"""Atomic writes (attndeploy/fsutil.py): the target appears whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from attndeploy.fsutil import atomic_write_bytes, atomic_write_png, file_sha256


def test_bytes_replace_the_target_and_leave_no_temporary_file(tmp_path: Path):
    target = tmp_path / "sub" / "out.bin"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in target.parent.iterdir()] == ["out.bin"]


def test_a_figure_becomes_a_png_that_reads_back(tmp_path: Path):
    figure = Figure(figsize=(2, 1), dpi=50)
    figure.add_subplot(1, 1, 1).plot([0, 1], [1, 0])
    written = atomic_write_png(figure, tmp_path / "plot.png")
    assert written == tmp_path / "plot.png"
    assert imread(written).shape[:2] == (50, 100)
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_a_figure_that_fails_to_render_leaves_the_old_file_untouched(tmp_path: Path):
    class Broken:
        def savefig(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("cannot render")

    target = tmp_path / "plot.png"
    target.write_bytes(b"previous")
    with pytest.raises(RuntimeError, match="cannot render"):
        atomic_write_png(Broken(), target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_file_sha256_is_the_digest_of_the_whole_file(tmp_path: Path):
    import hashlib

    data = bytes(range(256)) * 5000  # more than one 1 MiB block
    target = tmp_path / "blob"
    target.write_bytes(data)
    assert file_sha256(target) == hashlib.sha256(data).hexdigest()
