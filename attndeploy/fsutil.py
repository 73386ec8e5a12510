"""Files: atomic writes (a temp file or folder beside the target, then one rename) and digests.

A failure part-way never leaves a half-written file or directory at the target path.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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

    With `replace`, an existing `target` is swapped out only after the new one is complete.
    The caller checks whether `target` may be overwritten before entering.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield staging
        if target.exists():
            if not replace:
                raise FileExistsError(target)
            trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old",
                                          dir=target.parent))
            os.replace(target, trash / "old")
            os.replace(staging, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
