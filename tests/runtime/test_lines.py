"""The one reader of user text files (`attndeploy.runtime.lines`): lines without their ends, a
BOM skipped, bytes that are not UTF-8 named by offset and line, and a line over its limit
refused with one message naming the file and the line, without being read whole."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from attndeploy.errors import DataError, LoadTestError
from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES
from attndeploy.runtime.lines import MAX_JSONL_LINE_BYTES, MAX_TEXT_BYTES, LineReader, read_lines
from tests.long_lines import long_line_file, refused_within_memory


def test_lines_lose_their_ends_and_a_bom_and_keep_blank_ones(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbfw1 alpha\r\n\nw2\rb\nlast")
    assert read_lines(path) == ["w1 alpha", "", "w2\rb", "last"]


def test_the_limit_is_the_text_limit_and_a_line_at_it_is_read(tmp_path: Path) -> None:
    assert MAX_TEXT_BYTES == DEFAULT_MAX_TEXT_BYTES
    at = "é" * (MAX_TEXT_BYTES // 2)  # two bytes each: exactly the limit
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbf" + at.encode() + b"\r\n" + at.encode() + b"x\n")
    with LineReader(path) as lines:
        found = iter(lines)
        assert next(found) == at
        with pytest.raises(DataError, match=re.escape(
                f"line 2 of {path} has more than {MAX_TEXT_BYTES} bytes, the limit per text")):
            next(found)


def test_a_huge_line_is_refused_naming_file_and_line_without_being_read(tmp_path: Path) -> None:
    path = long_line_file(tmp_path / "t.txt", before=b"w1\nw2\n")
    refused_within_memory(lambda: read_lines(path), DataError,
                          rf"^line 3 of {re.escape(str(path))} has more than {MAX_TEXT_BYTES} "
                          r"bytes, the limit per text$")


def test_the_caller_names_its_limit_unit_and_error(tmp_path: Path) -> None:
    path = long_line_file(tmp_path / "d.jsonl")
    refused_within_memory(
        lambda: read_lines(path, limit=MAX_JSONL_LINE_BYTES, unit="JSONL line",
                           error=LoadTestError),
        LoadTestError, rf"line 1 of .* more than {MAX_JSONL_LINE_BYTES} bytes, the limit per "
                       "JSONL line")


def test_a_stream_is_read_with_bounded_reads() -> None:
    class Endless(io.RawIOBase):  # one short line, then a line that never ends
        def __init__(self) -> None:
            self.limits: list[int] = []

        def readline(self, limit: int = -1) -> bytes:
            self.limits.append(limit)
            return b"w1\n" if len(self.limits) == 1 else b"w" * limit

    stream = Endless()
    with pytest.raises(DataError, match="line 2 of stdin has more than"):
        list(LineReader(stream, "stdin"))
    assert all(0 < limit < MAX_TEXT_BYTES + 16 for limit in stream.limits)


def test_bytes_that_are_not_utf8_name_offset_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"w1\nw2 \xff\n")
    with pytest.raises(DataError, match=rf"{re.escape(str(path))} is not UTF-8 text \(bad byte "
                                        r"at offset 6, line 2\)"):
        read_lines(path)


def test_a_folder_or_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="is a folder"):
        read_lines(tmp_path)
    with pytest.raises(DataError, match="cannot read .*absent.txt: No such file"):
        read_lines(tmp_path / "absent.txt")
