"""Files with one over-long line, and how much memory reading them takes: every reader of user
text (`attndeploy.runtime.lines`) must refuse such a line without reading it whole."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

LONG_LINE_BYTES = 20 * 1024 * 1024  # far over every line limit (the largest: 448 KiB)
READ_AT_MOST = 4 * 1024 * 1024  # what refusing it may allocate: a few line limits, not the line


def long_line_file(path: Path, *, before: bytes = b"", line: bytes = b"w",
                   size: int = LONG_LINE_BYTES) -> Path:
    """`before` (whole lines), then one line of `size` bytes repeating `line`, then a newline."""
    body = (line * (size // len(line) + 1))[:size]
    path.write_bytes(before + body + b"\n")
    return path


def refused_within_memory(call: Callable[[], object], error: type[Exception],
                          match: str) -> None:
    """`call()` raises `error` matching `match`, and allocates less than READ_AT_MOST on the way
    (the long line was not read whole)."""
    tracemalloc.start()
    try:
        with pytest.raises(error, match=match):
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < READ_AT_MOST, f"{peak:,} bytes allocated: the line was read whole"
