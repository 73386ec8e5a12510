"""The one reader of user JSON (`attndeploy.jsonread`): any nesting deeper than its limit, even
100,000 levels (where Python's parser gives up with a RecursionError) or just below the parser's
own limit (where the next walk of it would), is the caller's error in one line; so is a file
over its size, text that is not JSON, or bytes that are not UTF-8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attndeploy.errors import CheckpointError, DataError
from attndeploy.jsonread import MAX_JSON_DEPTH, parse_json, read_json_file


def nested(depth: int, inner: str = "1") -> str:
    """`depth` arrays and objects within one another around `inner`."""
    opening = "".join('{"a": ' if i % 2 else "[" for i in range(depth))
    closing = "".join("}" if i % 2 else "]" for i in reversed(range(depth)))
    return opening + inner + closing


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 100_000])
def test_deep_nesting_is_the_callers_error_in_one_line(depth: int) -> None:
    with pytest.raises(DataError) as info:
        parse_json(nested(depth), "x.json", error=DataError)
    assert str(info.value) == (f"x.json nests JSON more than {MAX_JSON_DEPTH} levels deep; it is "
                               "corrupt (no file attndeploy reads nests so deep)")


def test_nesting_up_to_the_limit_and_wide_documents_are_read() -> None:
    assert parse_json(nested(MAX_JSON_DEPTH), "x", error=DataError) == json.loads(
        nested(MAX_JSON_DEPTH))
    wide = {"vocab": [f"w{i}" for i in range(100_000)], "labels": {"a": [1, [2]]}}
    assert parse_json(json.dumps(wide), "x", error=DataError) == wide
    assert parse_json("3", "x", error=DataError) == 3


def test_text_that_is_not_json_names_its_source_and_the_caller_may_word_it() -> None:
    with pytest.raises(DataError, match=r"^x.json is not valid JSON: Expecting value"):
        parse_json("nope", "x.json", error=DataError)
    with pytest.raises(DataError, match=r"^mine: column 1$"):
        parse_json("nope", "x.json", error=DataError, invalid=lambda e: f"mine: column {e.colno}")
    with pytest.raises(DataError, match="x.json is not valid JSON: 'utf-8' codec"):
        parse_json(b'{"a": "\xff"}', "x.json", error=DataError)


def test_a_file_is_bounded_in_size_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"a": "b" * 100}))
    assert read_json_file(path, error=CheckpointError)["a"] == "b" * 100
    with pytest.raises(CheckpointError, match=r"config.json holds more than 50 bytes, the most"):
        read_json_file(path, error=CheckpointError, max_bytes=50)
    with pytest.raises(CheckpointError, match=r"cannot read .*absent.json: No such file"):
        read_json_file(tmp_path / "absent.json", error=CheckpointError)
    path.write_text(nested(100_000))
    with pytest.raises(CheckpointError, match="nests JSON more than"):
        read_json_file(path, error=CheckpointError)
