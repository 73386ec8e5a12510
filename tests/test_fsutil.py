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


# --------------------------------------------------------------------------- hardening


def test_written_files_and_folders_get_the_umask_modes_not_0600(tmp_path: Path):
    import os

    from attndeploy.fsutil import atomic_directory, current_umask

    previous = os.umask(0o022)
    try:
        assert current_umask() == 0o022
        atomic_write_bytes(tmp_path / "f.bin", b"x")
        with atomic_directory(tmp_path / "folder") as staging:
            (staging / "inner").write_text("x")
    finally:
        os.umask(previous)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "folder").stat().st_mode & 0o777 == 0o755


def test_temporaries_of_a_dead_writer_are_removed_and_a_live_writers_kept(tmp_path: Path):
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    stale_file = tmp_path / f".out.bin.{dead_pid}.abc123.tmp"
    stale_dir = tmp_path / f".out.bin.{dead_pid}.def456.old"
    live = tmp_path / f".out.bin.{os.getpid()}.ghi789.tmp"
    stale_file.write_bytes(b"half")
    stale_dir.mkdir()
    live.write_bytes(b"writing")
    atomic_write_bytes(tmp_path / "out.bin", b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.bin", live.name])


@pytest.mark.parametrize("where", ["/proc/attndeploy-out.json", "/sys/attndeploy-out.json"])
def test_an_unwritable_place_is_an_output_error_not_an_os_error(where: str):
    from attndeploy.errors import OutputError

    with pytest.raises(OutputError, match="cannot write"):
        atomic_write_bytes(Path(where), b"x")


def test_a_folder_given_as_a_file_output_is_refused_up_front(tmp_path: Path):
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import check_output_file

    with pytest.raises(OutputError, match="it is a folder"):
        check_output_file(tmp_path)


def test_a_file_in_the_way_of_a_folder_output_is_refused(tmp_path: Path):
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import atomic_directory, check_output_dir

    blocker = tmp_path / "repo"
    blocker.write_text("not a folder")
    with pytest.raises(OutputError, match="is a file"):
        check_output_dir(blocker)
    with pytest.raises(OutputError, match="not a folder"), atomic_directory(blocker / "m"):
        pass
    assert blocker.read_text() == "not a folder"


def test_an_overlong_name_is_refused_and_a_failed_write_leaves_no_empty_parents(tmp_path: Path):
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import atomic_directory

    with pytest.raises(OutputError, match="characters"):
        atomic_write_bytes(tmp_path / ("x" * 300), b"x")
    with pytest.raises(KeyError), atomic_directory(tmp_path / "a" / "b" / "model"):
        raise KeyError("failed")
    assert list(tmp_path.iterdir()) == []
