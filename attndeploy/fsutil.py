"""Files: atomic writes (a temp file or folder beside the target, then one rename) and digests.

A failure part-way never leaves a half-written file or directory at the target path
(`output_set.atomic_outputs` writes several outputs, a command's reports or a model's folders,
all or none).
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
import hashlib
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attndeploy.errors import AttnDeployError, OutputError

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


def give_umask_mode(path: Path, *, directory: bool) -> None:
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def output_error(path: Path, exc: OSError, what: str = "write") -> OutputError:
    """One message shape for every file-system failure on an output."""
    return OutputError(f"cannot {what} {path}: {_reason(exc)}")


# --------------------------------------------------------------------------- stale temporaries


def temp_prefix(target: Path) -> str:
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
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise output_error(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        give_umask_mode(Path(tmp), directory=False)
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
