"""Atomic writes (attndeploy/fsutil.py, attndeploy/output_set.py): the target appears whole or
not at all."""

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

    from attndeploy.fsutil import current_umask
    from attndeploy.output_set import atomic_directory

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
    from attndeploy.fsutil import check_output_dir
    from attndeploy.output_set import atomic_directory

    blocker = tmp_path / "repo"
    blocker.write_text("not a folder")
    with pytest.raises(OutputError, match="is a file"):
        check_output_dir(blocker)
    with pytest.raises(OutputError, match="not a folder"), atomic_directory(blocker / "m"):
        pass
    assert blocker.read_text() == "not a folder"


def test_an_overlong_name_is_refused_and_a_failed_write_leaves_no_empty_parents(tmp_path: Path):
    from attndeploy.errors import OutputError
    from attndeploy.output_set import atomic_directory

    with pytest.raises(OutputError, match="characters"):
        atomic_write_bytes(tmp_path / ("x" * 300), b"x")
    with pytest.raises(KeyError), atomic_directory(tmp_path / "a" / "b" / "model"):
        raise KeyError("failed")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (what a writer killed mid-write leaves behind)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_an_os_error_without_an_errno_keeps_its_message(tmp_path: Path):
    from attndeploy.errors import OutputError
    from attndeploy.output_set import atomic_directory

    with pytest.raises(OutputError, match="disk full"), atomic_directory(tmp_path / "m"):
        raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, parsed", [
    (".cls.4242.a1b2c3d4.tmp", ("cls", 4242)),
    (".model.v1.onnx.17.x_9.old", ("model.v1.onnx", 17)),  # dots and digits in the target name
    (".7.7.7.tmp", ("7", 7)),
    ("cls", None),
    (".attndeploy-server.json", None),
    (".cls.tmp", None),
    (".cls.pid.abc.tmp", None),
    (".cls.12.abc.bak", None),
])
def test_a_temporary_name_gives_its_target_and_writer(name: str, parsed):
    from attndeploy.fsutil import parse_temporary_name

    assert parse_temporary_name(name) == parsed


def test_stale_temporaries_of_every_target_in_a_folder_are_removed(tmp_path: Path, dead_pid):
    import os

    from attndeploy.fsutil import is_stale_temporary, remove_stale_temporaries_in

    staging = tmp_path / f".other_model.{dead_pid}.k3j4h5g6.tmp"  # a killed `package --force`
    staging.mkdir()
    (staging / "config.pbtxt").write_text("name: 'other_model'")
    trash = tmp_path / f".cls.{dead_pid}.zz.old"
    trash.mkdir()
    half_file = tmp_path / f".labels.txt.{dead_pid}.q1.tmp"
    half_file.write_text("half")
    live = tmp_path / f".cls.{os.getpid()}.ab12.tmp"  # a writer at work: never touched
    live.mkdir()
    kept = [tmp_path / "cls", tmp_path / ".attndeploy-server.json", tmp_path / ".cache"]
    kept[0].mkdir()
    kept[1].write_text("{}")
    kept[2].mkdir()
    assert is_stale_temporary(staging.name) and not is_stale_temporary(live.name)
    assert not is_stale_temporary(".cache")
    removed = remove_stale_temporaries_in(tmp_path)
    assert sorted(removed) == sorted([staging, trash, half_file])
    assert sorted(tmp_path.iterdir()) == sorted([live, *kept])
    assert remove_stale_temporaries_in(tmp_path / "absent") == []


def test_remove_stale_temporaries_keeps_those_of_other_targets(tmp_path: Path, dead_pid):
    from attndeploy.fsutil import remove_stale_temporaries

    mine = tmp_path / f".out.bin.{dead_pid}.aa.tmp"
    other = tmp_path / f".out.bin2.{dead_pid}.bb.tmp"  # a prefix of its name is not enough
    mine.write_bytes(b"x")
    other.write_bytes(b"x")
    assert remove_stale_temporaries(tmp_path / "out.bin") == [mine]
    assert [p.name for p in tmp_path.iterdir()] == [other.name]


def test_an_output_that_is_an_input_is_refused_however_it_is_spelled(tmp_path: Path):
    import os

    from attndeploy.errors import OutputError
    from attndeploy.fsutil import check_not_an_input, same_path

    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    os.symlink(weights, tmp_path / "alias")
    os.link(weights, tmp_path / "hardlink")
    for spelling in [weights, tmp_path / "ckpt" / ".." / "ckpt" / "model.safetensors",
                     tmp_path / "alias", tmp_path / "hardlink"]:
        with pytest.raises(OutputError, match="it is an input of this command"):
            check_not_an_input(spelling, [tmp_path / "ckpt", weights])
    assert check_not_an_input(tmp_path / "out.onnx", [weights]) == tmp_path / "out.onnx"
    assert same_path(tmp_path / "new" / ".." / "x", tmp_path / "x")  # neither exists
    assert not same_path(tmp_path / "x", tmp_path / "y")


@pytest.mark.parametrize("where", ["/proc/attndeploy-out", "/sys/attndeploy-out",
                                   "/proc/new/deeper/out"])
def test_places_that_refuse_new_entries_are_refused_up_front_even_for_root(where: str):
    """Root passes every permission bit (os.access), yet cannot create entries in /proc."""
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import check_output_dir, check_output_file

    for check in (check_output_file, check_output_dir):
        with pytest.raises(OutputError, match=r"cannot write .*: /(proc|sys) is not writable"):
            check(Path(where))


def test_checking_a_writable_output_leaves_nothing_behind(tmp_path: Path):
    from attndeploy.fsutil import check_output_dir, check_output_file

    (tmp_path / "repo").mkdir()
    assert check_output_dir(tmp_path / "repo") == tmp_path / "repo"
    assert check_output_file(tmp_path / "new" / "report.json") == tmp_path / "new" / "report.json"
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]
    assert list((tmp_path / "repo").iterdir()) == []


# --------------------------------------------------------------------------- symbolic links


@pytest.fixture
def links(tmp_path: Path) -> dict[str, Path]:
    """`live`: a link to a file; `dangling`: a link to nothing; `pointed`: the live one's file."""
    pointed = tmp_path / "pointed.txt"
    pointed.write_text("not to be touched")
    (tmp_path / "live").symlink_to(pointed)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    return {"live": tmp_path / "live", "dangling": tmp_path / "dangling", "pointed": pointed}


@pytest.mark.parametrize("kind", ["live", "dangling"])
def test_a_link_at_an_output_path_is_an_existing_output(links, kind: str):
    from attndeploy.errors import CheckpointError, OutputError
    from attndeploy.fsutil import check_replaceable, output_exists

    link = links[kind]
    assert output_exists(link)
    with pytest.raises(OutputError, match=f"{link} already exists; pass --force"):
        check_replaceable(link, force=False)
    with pytest.raises(CheckpointError, match="already exists"):  # in the command's own stage
        check_replaceable(link, force=False, error=CheckpointError)
    check_replaceable(link, force=True)


@pytest.mark.parametrize("kind", ["live", "dangling"])
def test_a_replaced_link_is_replaced_itself_never_followed(links, tmp_path: Path, kind: str):
    from attndeploy.output_set import atomic_directory, atomic_outputs

    link = links[kind]  # a file, a set's file, a folder written over it
    atomic_write_bytes(link, b"written")
    assert not link.is_symlink() and link.read_bytes() == b"written"
    link.unlink()
    link.symlink_to(links["pointed"] if kind == "live" else tmp_path / "nowhere")
    with atomic_outputs(replace=True) as outputs:
        outputs.file(link).write_bytes(b"again")
    assert not link.is_symlink() and link.read_bytes() == b"again"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "theirs").write_text("kept")
    link.unlink()
    link.symlink_to(folder if kind == "live" else tmp_path / "nowhere")
    with atomic_directory(link, replace=True) as staging:
        (staging / "inside").write_text("x")
    assert not link.is_symlink() and [p.name for p in link.iterdir()] == ["inside"]
    assert [p.name for p in folder.iterdir()] == ["theirs"]
    assert links["pointed"].read_text() == "not to be touched"
    assert not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "folder", "live",
                                                          "pointed.txt"]


def test_a_dangling_link_on_the_way_to_an_output_is_named(links, tmp_path: Path):
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import check_output_container, check_output_dir, check_output_file

    missing = f"is a symbolic link to {tmp_path / 'nowhere'}, which does not exist"
    for check in (check_output_file, check_output_dir, check_output_container):
        with pytest.raises(OutputError, match=f"{links['dangling']} {missing}"):
            check(links["dangling"] / "deeper" / "out")
    with pytest.raises(OutputError, match=f"cannot write into {links['dangling']}: it {missing}"):
        check_output_container(links["dangling"])  # a repository is filled, never replaced
    (tmp_path / "real").mkdir()
    (tmp_path / "repo").symlink_to(tmp_path / "real")
    assert check_output_container(tmp_path / "repo") == tmp_path / "repo"  # followed


# --------------------------------------------------------------------------- all or none


def test_outputs_of_a_set_appear_together_at_the_end(tmp_path: Path):
    from attndeploy.output_set import atomic_outputs

    with atomic_outputs() as outputs:
        atomic_write_bytes(outputs.file(tmp_path / "a" / "report.json"), b"{}")
        (outputs.folder(tmp_path / "model") / "config.pbtxt").write_text("name: 'm'")
        outputs.file(tmp_path / "not-written.png")  # its writer had nothing to write
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a"]
        assert list((tmp_path / "a").iterdir())[0].name.startswith(".report.json.")
    assert (tmp_path / "a" / "report.json").read_bytes() == b"{}"
    assert (tmp_path / "model" / "config.pbtxt").read_text() == "name: 'm'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "model"]
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["report.json"]


def test_an_interrupted_set_leaves_nothing_and_keeps_what_was_there(tmp_path: Path):
    from attndeploy.output_set import atomic_outputs

    (tmp_path / "old.json").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_outputs(replace=True) as outputs:
        atomic_write_bytes(outputs.file(tmp_path / "old.json"), b"new")
        atomic_write_bytes(outputs.file(tmp_path / "new" / "deeper" / "plot.png"), b"png")
        raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["old.json"]
    assert (tmp_path / "old.json").read_text() == "old"


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_a_rename_that_fails_undoes_those_done_and_puts_back_what_they_replaced(
    tmp_path: Path, monkeypatch, interruption
):
    import attndeploy.output_set as output_set
    from attndeploy.errors import OutputError

    (tmp_path / "a.json").write_text("old a")
    real = output_set._rename_new
    calls = []

    def rename_new(source: Path, target: Path) -> None:
        calls.append(target.name)
        if target.name == "b.png":  # the second, in the order of their paths
            raise interruption(5, "Input/output error")
        real(source, target)

    monkeypatch.setattr(output_set, "_rename_new", rename_new)
    expected = KeyboardInterrupt if interruption is KeyboardInterrupt else OutputError
    with pytest.raises(expected), output_set.atomic_outputs(replace=True) as outputs:
        atomic_write_bytes(outputs.file(tmp_path / "b.png"), b"new b")
        atomic_write_bytes(outputs.file(tmp_path / "a.json"), b"new a")
    assert calls == ["a.json", "b.png"]
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "old a"


def test_an_output_another_process_wrote_meanwhile_is_kept_and_nothing_of_this_set(
    tmp_path: Path
):
    from attndeploy.errors import ConcurrentWriteError
    from attndeploy.output_set import atomic_outputs

    with pytest.raises(ConcurrentWriteError, match="another process wrote it") as caught, \
            atomic_outputs() as outputs:
        (outputs.folder(tmp_path / "m") / "f").write_text("mine")
        (outputs.folder(tmp_path / "m_text") / "f").write_text("mine")
        atomic_write_bytes(outputs.file(tmp_path / "z.json"), b"mine")
        (tmp_path / "m_text").mkdir()  # the other writer's, between the check and the rename
        (tmp_path / "m_text" / "f").write_text("theirs")
    assert caught.value.path == tmp_path / "m_text"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m_text"]
    assert (tmp_path / "m_text" / "f").read_text() == "theirs"


def test_a_file_another_process_wrote_meanwhile_is_not_replaced(tmp_path: Path, monkeypatch):
    import attndeploy.output_set as output_set
    from attndeploy.errors import ConcurrentWriteError

    real = output_set._rename_new

    def rename_new(source: Path, target: Path) -> None:
        target.write_bytes(b"theirs")  # the other writer, between the check and the rename
        real(source, target)

    monkeypatch.setattr(output_set, "_rename_new", rename_new)
    with pytest.raises(ConcurrentWriteError), output_set.atomic_outputs() as outputs:
        atomic_write_bytes(outputs.file(tmp_path / "r.json"), b"mine")
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert (tmp_path / "r.json").read_bytes() == b"theirs"


def test_an_os_error_while_writing_a_set_names_the_output_not_its_temporary(tmp_path: Path):
    import errno

    from attndeploy.errors import OutputError
    from attndeploy.output_set import atomic_outputs

    with pytest.raises(OutputError) as caught, atomic_outputs() as outputs:
        outputs.file(tmp_path / "r.json")
        folder = outputs.folder(tmp_path / "model")
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "1" / "model.onnx"))
    assert str(caught.value) == (f"cannot write {tmp_path / 'model' / '1' / 'model.onnx'}: "
                                 "No space left on device")
    assert list(tmp_path.iterdir()) == []
