"""The one reader of JSON that comes from the user: files (a checkpoint's or a Hugging Face
model's config.json, tokenizer files, a data file's lines) and the JSON strings in an ONNX
file's metadata.

Each read is bounded before or while it is parsed: a file in size (`MAX_JSON_BYTES` unless the
caller knows a tighter bound), and every document in nesting depth (`MAX_JSON_DEPTH`). Python's
parser gives up on deep nesting with a RecursionError (a 100,000-deep `[[[...]]]` in a
config.json ended `info` and `export` with a bug report); a document just below that depth
parses, but then fails in whatever walks it next (`json.dumps`, a recursive check). So deep
nesting is caught in the parser and measured after it, without recursion, and either way it is
the caller's error (`error`: CheckpointError, ModelError, DataError, ...) with one line that
names the source. No file attndeploy reads nests anywhere near the limit: a Hugging Face
tokenizer.json nests five levels, a checkpoint's config.json under ten (with such a tokenizer's
record inside it).

No torch and nothing heavy here: in-process inference (`predict`) reads metadata through it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attndeploy.errors import AttnDeployError

MAX_JSON_DEPTH = 64  # objects and arrays within one another
MAX_JSON_BYTES = 64 * 1024 * 1024  # a JSON file read whole (a checkpoint config.json's bound)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than `limit` levels in `value` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return False


def too_deep(source: str, limit: int = MAX_JSON_DEPTH) -> str:
    return (f"{source} nests JSON more than {limit} levels deep; it is corrupt (no file "
            "attndeploy reads nests so deep)")


def parse_json(text: str | bytes, source: str, *, error: type[AttnDeployError],
               max_depth: int = MAX_JSON_DEPTH,
               invalid: Callable[[json.JSONDecodeError], str] | None = None) -> Any:
    """The JSON value of `text`; `error` with one line naming `source` when it is not JSON
    (bytes: not UTF-8 either) or nests deeper than `max_depth`. `invalid` words the message
    for text that is not JSON, where a caller has its own (default: "<source> is not valid
    JSON: <why>")."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise error(too_deep(source, max_depth)) from None
    except json.JSONDecodeError as exc:
        message = invalid(exc) if invalid is not None else f"{source} is not valid JSON: {exc}"
        raise error(message) from None
    except UnicodeDecodeError as exc:
        raise error(f"{source} is not valid JSON: {exc}") from None
    if isinstance(value, dict | list) and _deeper_than(value, max_depth):
        raise error(too_deep(source, max_depth))
    return value


def read_json_file(path: Path, *, error: type[AttnDeployError], source: str | None = None,
                   max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of the file at `path`, at most `max_bytes` long (checked before it is
    read, and while reading for a file whose size is not known); `error` with one line naming
    `source` (default: the path) for a file that is too large, unreadable, or not JSON."""
    source = source or str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise error(f"{source} holds more than {max_bytes:,} bytes, the most a JSON file "
                    "attndeploy reads may take; it is corrupt or not the file it should be")
    return parse_json(data, source, error=error, max_depth=max_depth)
