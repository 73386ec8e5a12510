"""Files: atomic writes (a temp file or folder beside the target, then one rename) and digests.

A failure part-way never leaves a half-written file or directory at the target path, and
`atomic_outputs` writes several outputs (a command's reports, a model's folders) all or none.
Temporaries are named `.<target>.<pid>.<random>.tmp` (folders being replaced: `.old`), so the
next write to the same target removes those of a process that no longer runs (one killed
mid-write), and never those of a writer still at work (`remove_stale_temporaries_in` does so for
every target of a folder, such as a model repository). What is written gets the modes the umask
gives (as `open` and `mkdir` do), not the 0600/0700 of `mkstemp`/`mkdtemp`: a server running as
another user (an NGC container) must be able to read a model repository.

One rule for what is at an output path (`output_exists`): a file, a folder or a symbolic link,
dangling or not, is an existing output, replaced only with --force (`check_replaceable`); a link
is then replaced itself, never the file or folder it points at (every write ends in a rename).

Every OS error becomes an `OutputError` naming the path and the reason; `check_output_file`,
`check_output_dir`, `check_output_container` and `check_not_an_input` let a command refuse an
unusable output (or one that would overwrite its own input) before it starts its work.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attndeploy.errors import AttnDeployError, ConcurrentWriteError, OutputError

NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- modes and errors


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (Linux ≥ 4.7)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _give_umask_mode(path: Path, *, directory: bool) -> None:
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def output_error(path: Path, exc: OSError, what: str = "write") -> OutputError:
    """One message shape for every file-system failure on an output."""
    return OutputError(f"cannot {what} {path}: {_reason(exc)}")


# --------------------------------------------------------------------------- stale temporaries


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


# `.<target>.<pid>.<random>.tmp|.old`; mkstemp's random part has no dots, so the greedy target
# name backtracks to the last two dot-separated fields before the suffix.
_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.[^.]+\.(?:tmp|old)$")


def parse_temporary_name(name: str) -> tuple[str, int] | None:
    """The target name and writer pid of one of this module's temporaries; None for any other."""
    match = _TEMPORARY.match(name)
    return None if match is None else (match["target"], int(match["pid"]))


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale_temporary(name: str) -> bool:
    """Whether `name` is a temporary whose writer no longer runs (killed mid-write)."""
    parsed = parse_temporary_name(name)
    return parsed is not None and not _pid_running(parsed[1])


def _remove_stale(folder: Path, target_name: str | None) -> list[Path]:
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        parsed = parse_temporary_name(entry.name)
        if parsed is None or (target_name is not None and parsed[0] != target_name):
            continue
        if _pid_running(parsed[1]):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        removed.append(entry)
    return removed


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove the temporaries of `target` left by writers that no longer run; return them."""
    target = Path(target)
    return _remove_stale(target.parent, target.name)


def remove_stale_temporaries_in(folder: Path) -> list[Path]:
    """Remove every temporary in `folder` (of any target) whose writer no longer runs.

    For a folder of many outputs written one by one, such as a model repository: a writer
    killed while staging one model leaves its temporary, and the next write may be of another.
    Temporaries of writers still at work are kept.
    """
    return _remove_stale(Path(folder), None)


def is_staging_name(name: str) -> bool:
    """Whether a folder entry is one of this module's temporaries (or any hidden entry)."""
    return name.startswith(".")


# --------------------------------------------------------------------------- checks up front


def _check_name(path: Path) -> None:
    # the temporary adds ".<pid>.<random>.tmp" and a leading dot to the name
    if len(os.fsencode(path.name)) + 32 > NAME_MAX:
        raise OutputError(
            f"cannot write {path}: the name is {len(path.name)} characters; keep it under "
            f"{NAME_MAX - 32}"
        )


def _check_writable(path: Path, folder: Path) -> None:
    """Refuse `path` when no entry can be created in `folder`.

    Permission bits are not enough: root may write anywhere they forbid, yet not in /proc or
    /sys, nor on a read-only mount. So an empty file is created and removed (named like a
    temporary: a probe cut short is removed with the stale temporaries).
    """
    where = "it" if folder == path else str(folder)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: {where} is not writable")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".probe.{os.getpid()}.", suffix=".tmp", dir=folder)
    except OSError as exc:  # /proc says "no such file", which would only confuse
        reason = "" if isinstance(exc, FileNotFoundError) else f" ({_reason(exc)})"
        raise OutputError(f"cannot write {path}: {where} is not writable{reason}") from exc
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _dangling(path: Path) -> str | None:
    """Where the symbolic link `path` points, when that is missing; None for anything else."""
    if path.is_symlink() and not path.exists():
        try:
            return os.readlink(path)
        except OSError:
            return "?"
    return None


def _check_parent(path: Path) -> None:
    parent = path.parent
    for ancestor in [parent, *parent.parents]:
        missing = _dangling(ancestor)
        if missing is not None:  # a folder cannot be made there without replacing the link
            raise OutputError(f"cannot write {path}: {ancestor} is a symbolic link to "
                              f"{missing}, which does not exist")
        if ancestor.exists():
            if not ancestor.is_dir():
                raise OutputError(f"cannot write {path}: {ancestor} is not a folder")
            _check_writable(path, ancestor)
            return


def check_output_file(path: Path) -> Path:
    """Refuse, before any work, a file output that cannot be written; return it."""
    path = Path(path)
    _check_name(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
    _check_parent(path)
    return path


def output_exists(path: Path) -> bool:
    """Whether an output at `path` exists: a file, a folder or a symbolic link, dangling or not.

    The one rule of every writer: a link is an output like any other (refused without --force,
    then replaced itself, never followed), so that a link left at an output path, or one laid
    there by someone else, never sends a write elsewhere."""
    return os.path.lexists(path)


def check_replaceable(path: Path, *, force: bool,
                      error: type[AttnDeployError] = OutputError) -> None:
    """The command line's rule for every output: one that exists (`output_exists`) is replaced
    only with --force (`force`); else `error` (the command's stage) says so. Checked after
    `check_output_file` / `check_output_dir` and `check_not_an_input`, whose messages say more."""
    if not force and output_exists(Path(path)):
        raise error(already_exists(Path(path)))


def already_exists(path: Path) -> str:
    """The one message for an existing output written without --force."""
    return f"{path} already exists; pass --force to replace it"


def check_output_dir(path: Path) -> Path:
    """Refuse, before any work, a folder output that cannot be created or replaced; return it."""
    path = Path(path)
    _check_name(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write {path}: it is a file, not a folder")
    _check_parent(path)
    if path.is_dir():  # files are written inside it (a repository) as well as beside it
        _check_writable(path, path)
    return path


def check_output_container(path: Path) -> Path:
    """Refuse, before any work, a folder that outputs are written into and that is never replaced
    itself (a model repository): `check_output_dir`'s checks, and a symbolic link there is
    followed (a repository may live elsewhere), so a dangling one is refused: a folder cannot
    be made there without replacing the link. Return it."""
    path = Path(path)
    missing = _dangling(path)
    if missing is not None:
        raise OutputError(f"cannot write into {path}: it is a symbolic link to {missing}, which "
                          "does not exist; create that folder or give another path")
    return check_output_dir(path)


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode where both exist (hard and symbolic
    links, `..`), else the same absolute path once symbolic links are followed."""
    a, b = Path(a), Path(b)
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_not_an_input(path: Path, inputs: Iterable[Path]) -> Path:
    """Refuse an output that is one of the command's inputs (writing it would destroy it)."""
    path = Path(path)
    for source in inputs:
        if same_path(path, source):
            alias = "" if Path(source) == path else f" ({source})"
            raise OutputError(
                f"cannot write {path}: it is an input of this command{alias}; "
                "give another output path"
            )
    return path


# --------------------------------------------------------------------------- atomic writes


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    check_output_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise output_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        _give_umask_mode(Path(tmp), directory=False)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise output_error(path, exc) from exc
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_png(figure: Any, path: Path, **savefig_kwargs: Any) -> Path:
    """Render a matplotlib figure as PNG in memory, then write it like `atomic_write_bytes`."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", **savefig_kwargs)
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)


@contextlib.contextmanager
def atomic_directory(target: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh temp folder beside `target`; on success it becomes `target`.

    With `replace`, an existing `target` (`output_exists`) is swapped out only after the new one
    is complete. The caller checks whether `target` may be overwritten before entering; one that
    appears meanwhile (another process) is a `ConcurrentWriteError`. A parent folder this call
    creates is removed again when the write fails (no empty folders left behind).
    """
    with atomic_outputs(replace=replace) as outputs:
        yield outputs.folder(target)


@dataclass
class _Staged:
    target: Path
    staging: Path  # the temporary folder beside `target`
    written: Path  # what becomes `target`: `staging` itself (a folder) or a file inside it
    started: bool = False  # its commit began
    renamed: bool = False
    trash: Path | None = None  # the folder holding the replaced `target` until the end


class OutputSet:
    """Outputs written all or none (`atomic_outputs`): each is written to a temporary beside it,
    and at the end all are renamed into place, in the order of their paths (two writers of the
    same outputs both start with the first: one of them gets them all)."""

    def __init__(self, *, replace: bool) -> None:
        self.replace = replace
        self._staged: list[_Staged] = []
        self._created: list[Path] = []  # parent folders made for the temporaries

    def file(self, target: Path) -> Path:
        """The path to write the file `target` at (in a temporary folder beside it)."""
        target = check_output_file(Path(target))
        staging = self._stage(target)
        return self._add(target, staging, staging / target.name)

    def folder(self, target: Path) -> Path:
        """An empty folder that becomes the folder `target`."""
        target = check_output_dir(Path(target))
        staging = self._stage(target)
        return self._add(target, staging, staging)

    def _add(self, target: Path, staging: Path, written: Path) -> Path:
        if any(same_path(target, other.target) for other in self._staged):
            self._remove(staging)
            raise OutputError(f"cannot write {target}: it is written twice")
        self._staged.append(_Staged(target, staging, written))
        return written

    def _stage(self, target: Path) -> Path:
        self._created.extend(p for p in [target.parent, *target.parent.parents]
                             if not os.path.lexists(p))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(target)
            staging = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp",
                                            dir=target.parent))
            _give_umask_mode(staging, directory=True)
        except OSError as exc:
            raise output_error(target, exc) from exc
        return staging

    def commit(self) -> None:
        """Rename every output into place; on any failure (Ctrl-C included) undo the renames
        done, put back what they replaced and remove every temporary."""
        try:
            for item in sorted(self._staged, key=lambda item: str(item.target)):
                if item.written != item.staging and not os.path.lexists(item.written):
                    continue  # a file its writer chose not to write
                self._commit(item)
        except BaseException:
            self._undo()
            raise
        for item in self._staged:
            if item.trash is not None:
                shutil.rmtree(item.trash, ignore_errors=True)
            if item.written != item.staging:
                with contextlib.suppress(OSError):
                    item.staging.rmdir()
        self._staged = []

    def _commit(self, item: _Staged) -> None:
        target = item.target
        item.started = True
        try:
            if output_exists(target):
                if not self.replace:
                    raise self._conflict(target)
                item.trash = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".old",
                                                   dir=target.parent))
                os.replace(target, item.trash / "old")
            _rename_new(item.written, target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise self._conflict(target) from exc
            raise output_error(target, exc) from exc
        item.renamed = True

    @staticmethod
    def _conflict(target: Path) -> ConcurrentWriteError:
        return ConcurrentWriteError(f"cannot write {target}: another process wrote it at the "
                                    "same time; nothing of this run was kept", target)

    def _undo(self) -> None:
        for item in reversed(self._staged):
            if self._landed(item):
                self._remove(item.target)
            if item.trash is not None:
                old = item.trash / "old"
                if os.path.lexists(old) and not output_exists(item.target):
                    with contextlib.suppress(OSError):
                        os.replace(old, item.target)
                shutil.rmtree(item.trash, ignore_errors=True)
                item.trash = None
        self.discard()

    @staticmethod
    def _landed(item: _Staged) -> bool:
        """Whether `item` is at its target, though a Ctrl-C may have come before `renamed` was
        set: its temporary is gone (renamed) or is the target's inode (linked)."""
        if item.renamed:
            return True
        if not item.started or not os.path.lexists(item.target):
            return False
        return not os.path.lexists(item.written) or same_path(item.written, item.target)

    def discard(self) -> None:
        """Remove every temporary, and the parent folders made for them if still empty."""
        for item in self._staged:
            if not item.renamed:
                self._remove(item.staging)
            elif item.written != item.staging:
                with contextlib.suppress(OSError):
                    item.staging.rmdir()
        self._staged = []
        _remove_empty(sorted(set(self._created), key=lambda p: len(p.parts), reverse=True))
        self._created = []

    def error_for(self, exc: OSError) -> OutputError:
        """`output_error` for an OS error met while writing the temporaries, naming the output
        (and the file in an output folder) rather than the temporary."""
        where = Path(os.fsdecode(exc.filename)) if exc.filename is not None else None
        for item in self._staged:
            if where is not None and (where == item.written or item.written in where.parents):
                return output_error(item.target / where.relative_to(item.written), exc)
        if where is None and len(self._staged) == 1:
            return output_error(self._staged[0].target, exc)
        return output_error(where or Path(", ".join(str(i.target) for i in self._staged)), exc)

    @staticmethod
    def _remove(path: Path) -> None:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _rename_new(source: Path, target: Path) -> None:
    """Rename `source` to `target`, which must not exist: a file is linked (an existing
    `target` fails with EEXIST, never replaced), where the file system has no hard links it is
    renamed; a folder is renamed (over an existing folder that has entries it fails)."""
    if source.is_dir():
        os.rename(source, target)
        return
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise
        os.replace(source, target)  # no hard links here (a FAT or some network file systems)
    else:
        os.unlink(source)


@contextlib.contextmanager
def atomic_outputs(*, replace: bool = False) -> Iterator[OutputSet]:
    """Write several outputs all or none: yield an `OutputSet` whose `file(target)` and
    `folder(target)` give where to write each; when the block ends without an exception every
    output is renamed into place (`OutputSet.commit`), else every temporary is removed.

    A Ctrl-C while writing or renaming leaves the outputs as they were before (a rerun needs no
    --force). With `replace` an existing output is replaced; without, one that appeared since
    the caller checked (another process writing it) is a `ConcurrentWriteError` and none is
    written. Each target is checked like `check_output_file` / `check_output_dir`; an OS error
    while writing becomes an `OutputError` naming the output."""
    outputs = OutputSet(replace=replace)
    try:
        yield outputs
    except OSError as exc:  # writing a temporary: a full disk, a read-only place
        error = outputs.error_for(exc)
        outputs.discard()
        raise error from exc
    except BaseException:
        outputs.discard()
        raise
    outputs.commit()


def write_files(folder: Path, files: dict[str, str | bytes]) -> None:
    """Write `{relative path: content}` into `folder` (a staging folder of `atomic_directory`),
    making sub-folders; str content as UTF-8 text."""
    for relative, content in files.items():
        target = Path(folder) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a failed write created (deepest first), if they are still empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()
