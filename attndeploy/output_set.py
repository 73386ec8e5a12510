"""Several outputs written all or none: `atomic_outputs` stages each beside its target (a
folder, or a file) and renames them all into place at the end, in path order, undoing the renames
already made when a later one fails or a Ctrl-C comes; `atomic_directory` is one folder written
so. Temporaries, modes and the rule for what is at an output path are `fsutil`'s."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attndeploy.errors import ConcurrentWriteError, OutputError
from attndeploy.fsutil import (
    check_output_dir,
    check_output_file,
    give_umask_mode,
    output_error,
    output_exists,
    remove_stale_temporaries,
    same_path,
    temp_prefix,
)


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
            staging = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".tmp",
                                            dir=target.parent))
            give_umask_mode(staging, directory=True)
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
                item.trash = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".old",
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
