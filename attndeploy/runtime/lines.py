"""The one reader of user text files a line at a time, and the one limit on their lines.

Every command that reads texts from a file reads it through `LineReader`: `predict --text-file`,
`loadtest --text-file` and `tune --text-file` (one text a line), and the JSONL files of `train
--data`, `train --hf-model --data`, `quantize --data` and `held-out` (one `{"text", "label"}`
object a line). Each line is read with a bounded `readline`, so a line over its limit is refused
after at most its limit and a few bytes were read, never whole (one 500 MB line once took 5.5 GB
and a minute before anything failed), with one message naming the file and the line:

    line 2 of texts.txt has more than 65536 bytes, the limit per text

The limits derive from one number, `MAX_TEXT_BYTES` (`attndeploy.runtime.DEFAULT_MAX_TEXT_BYTES`,
the longest text predict, infer and a served text model take). Lines are split at '\\n' alone; a
final newline adds no line, one '\\r' before a '\\n' is dropped and a UTF-8 BOM at the start is
skipped; bytes that are not UTF-8 name their offset and line. It lives in the runtime, beside
the text limit, so that predict reads files without importing torch.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from attndeploy.errors import AttnDeployError, DataError
from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES

MAX_TEXT_BYTES = DEFAULT_MAX_TEXT_BYTES  # a line that is one text
# A JSONL line holds a text, its label and the JSON around them. JSON may write a character as
# \uXXXX: six bytes for one byte of UTF-8 at worst (a control character; `json.dumps` by default
# escapes every non-ASCII character, two to six bytes for each of its UTF-8 bytes). So the line
# limit lets through any text predict takes, escaped however a writer likes, plus as much again
# for the label and the syntax; a longer line cannot hold a text attndeploy could run.
MAX_JSONL_LINE_BYTES = 6 * MAX_TEXT_BYTES + MAX_TEXT_BYTES
UTF8_BOM = b"\xef\xbb\xbf"
_SLACK = len(UTF8_BOM) + len("\r\n")  # what a line may carry beyond its content


class LineReader:
    """The lines of a file, or of an open binary stream (`name` names it in messages), read
    lazily, without line ends, each at most `limit` bytes (`MAX_TEXT_BYTES` unless told;
    `unit` names what one line is, in the message). Problems are `error`s (DataError unless
    told): a file that cannot be opened, a line over the limit, bytes that are not UTF-8.

    `size` is the file's size in bytes (None for a pipe or a stream), `offset` the bytes read
    so far. Use as a context manager to close a file it opened.
    """

    def __init__(self, source: Path | str | BinaryIO | Any, name: str | None = None, *,
                 limit: int | None = None, unit: str = "text",
                 error: type[AttnDeployError] = DataError) -> None:
        self.limit = MAX_TEXT_BYTES if limit is None else limit
        self.unit, self.error = unit, error
        self.size: int | None = None
        self.offset = 0
        self._own = isinstance(source, (str, Path))
        if not self._own:
            self.name = name or str(getattr(source, "name", "the stream"))
            self._handle: BinaryIO | Any = source
            return
        self.name = name or str(source)
        try:
            self._handle = open(source, "rb")  # noqa: SIM115  (closed by __exit__)
            info = os.fstat(self._handle.fileno())
        except IsADirectoryError:
            raise error(f"{self.name} is a folder, not a text file") from None
        except OSError as exc:
            raise error(f"cannot read {self.name}: {exc.strerror or exc}") from None
        if stat.S_ISREG(info.st_mode):
            self.size = info.st_size

    def __enter__(self) -> LineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._handle.close()

    def over_limit(self, number: int) -> AttnDeployError:
        return self.error(f"line {number} of {self.name} has more than {self.limit} bytes, "
                          f"the limit per {self.unit}")

    def __iter__(self) -> Iterator[str]:
        number = 0
        try:
            # One more byte than a line may hold: a read that fills it has found a longer line.
            while raw := self._handle.readline(self.limit + _SLACK + 1):
                number += 1
                start = self.offset
                self.offset += len(raw)
                if isinstance(raw, bytes):
                    if number == 1 and raw.startswith(UTF8_BOM):
                        raw, start = raw[len(UTF8_BOM):], start + len(UTF8_BOM)
                    content = raw[:-1] if raw.endswith(b"\n") else raw
                    content = content[:-1] if content.endswith(b"\r") else content
                    if len(content) > self.limit:
                        raise self.over_limit(number)
                    try:
                        line = content.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise self.error(f"{self.name} is not UTF-8 text (bad byte at offset "
                                         f"{start + exc.start}, line {number})") from None
                else:  # a text stream (in place of stdin)
                    line = raw[:-1] if raw.endswith("\n") else raw
                    line = line[:-1] if line.endswith("\r") else line
                    if len(line.encode("utf-8")) > self.limit:
                        raise self.over_limit(number)
                yield line
        except OSError as exc:
            raise self.error(f"cannot read {self.name}: {exc.strerror or exc}") from None


def read_lines(path: Path, *, limit: int | None = None, unit: str = "text",
               error: type[AttnDeployError] = DataError) -> list[str]:
    """Every line of the file at `path` (`LineReader`'s rules), read now."""
    with LineReader(Path(path), limit=limit, unit=unit, error=error) as lines:
        return list(lines)
