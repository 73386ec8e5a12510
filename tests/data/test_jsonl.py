"""JSONL loading: the happy path, and every malformed input failing with its file and line."""

from __future__ import annotations

import json

import pytest
import torch

from attndeploy.data import WordTokenizer, load_jsonl, read_jsonl
from attndeploy.errors import DataError


def write(tmp_path, lines: list[str], name: str = "data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = [
    json.dumps({"text": "A great film!", "label": "pos"}),
    "",
    json.dumps({"text": "dull and long", "label": "neg"}),
    json.dumps({"text": "great", "label": "pos"}),
]


def test_read_jsonl_skips_blank_lines_and_keeps_order(tmp_path):
    texts, labels = read_jsonl(write(tmp_path, GOOD))
    assert texts == ["A great film!", "dull and long", "great"]
    assert labels == ["pos", "neg", "pos"]


def test_integer_labels_become_strings(tmp_path):
    path = write(tmp_path, ['{"text": "a", "label": 1}', '{"text": "b", "label": "0"}'])
    assert read_jsonl(path)[1] == ["1", "0"]


def test_load_jsonl_builds_tokenizer_and_sorted_label_names(tmp_path):
    dataset, tokenizer = load_jsonl(write(tmp_path, GOOD))
    assert dataset.label_names == ("neg", "pos")
    assert dataset.head == "classification"
    assert dataset.labels.tolist() == [1, 0, 1]
    assert dataset.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0]]
    assert tokenizer.decode(dataset.input_ids[0].tolist()) == ["a", "great", "film", "!"]


def test_load_jsonl_with_a_given_tokenizer_and_label_names(tmp_path):
    tokenizer = WordTokenizer(["<pad>", "<unk>", "great"])
    path = write(tmp_path, [json.dumps({"text": "great film", "label": "pos"})])
    dataset, used = load_jsonl(path, tokenizer=tokenizer, label_names=("pos", "neg"))
    assert used is tokenizer
    assert dataset.input_ids.tolist() == [[2, 1]]  # "film" is unknown
    assert dataset.labels.tolist() == [0]  # a single label is fine when the names are given


def test_a_label_outside_the_given_names_fails_with_its_line(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(DataError, match=r"data\.jsonl:3: label 'neg' is not one of pos, meh"):
        load_jsonl(path, label_names=("pos", "meh"))


def test_a_text_longer_than_max_seq_fails_with_its_line_unless_truncated(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(DataError, match=r"data\.jsonl:1: text has 4 tokens, more than max_seq=3"):
        load_jsonl(path, max_seq=3)
    dataset, _ = load_jsonl(path, max_seq=3, truncate=True)
    assert dataset.input_ids.shape == (3, 3)
    assert torch.equal(dataset.attention_mask[0], torch.ones(3, dtype=torch.long))


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"text": "x", "label": ', r"data\.jsonl:3: invalid JSON"),
        ('["x", "pos"]', r"data\.jsonl:3: expected an object"),
        ('{"label": "pos"}', r"data\.jsonl:3: missing 'text'"),
        ('{"text": "x"}', r"data\.jsonl:3: missing 'label'"),
        ('{"text": "  ", "label": "pos"}', r"data\.jsonl:3: empty text"),
        ('{"text": 5, "label": "pos"}', r"data\.jsonl:3: 'text' must be a string"),
        ('{"text": "x", "label": [1]}', r"data\.jsonl:3: 'label' must be a string or an integer"),
        ('{"text": "x", "label": true}', r"data\.jsonl:3: 'label' must be a string or an integer"),
        ('{"text": "x", "label": ""}', r"data\.jsonl:3: empty label"),
    ],
)
def test_a_malformed_line_fails_naming_file_and_line(tmp_path, bad_line, message):
    # Line 2 is blank: line numbers count every line of the file.
    path = write(tmp_path, [GOOD[0], "", bad_line, GOOD[2]])
    with pytest.raises(DataError, match=message):
        read_jsonl(path)
    with pytest.raises(DataError, match=message):
        load_jsonl(path)


def test_a_file_with_one_label_fails(tmp_path):
    path = write(tmp_path, [GOOD[0], GOOD[3]])
    with pytest.raises(DataError, match=r"data\.jsonl: needs at least 2 distinct labels"):
        read_jsonl(path)
    with pytest.raises(DataError, match="at least 2 distinct labels"):
        load_jsonl(path)


def test_an_empty_file_fails(tmp_path):
    with pytest.raises(DataError, match="no examples"):
        read_jsonl(write(tmp_path, ["", "  "]))


def test_a_missing_file_fails(tmp_path):
    with pytest.raises(DataError, match=r"missing\.jsonl: no such data file"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_a_file_that_is_not_utf8_fails(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"text": "caf\xe9", "label": "a"}\n'.encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_jsonl(path)


def test_a_single_token_text_trains_as_unk_and_keeps_the_vocabulary_small(tmp_path):
    """One token of 60,000 characters (a text within the limit per text; a longer line is
    refused before it is read, see `test_an_over_long_line_is_refused_without_being_read`)."""
    blob = "a" * 60_000
    path = write(tmp_path, [json.dumps({"text": blob, "label": "pos"}),
                            json.dumps({"text": "dull film", "label": "neg"})])
    dataset, tokenizer = load_jsonl(path)
    assert tokenizer.vocab == ("<pad>", "<unk>", "dull", "film")
    assert len(json.dumps(tokenizer.to_dict())) < 100  # what config.json will hold
    assert dataset.input_ids[0, :1].tolist() == [WordTokenizer.UNK_ID]


@pytest.mark.parametrize("reader", ["read_jsonl", "load_jsonl", "load_jsonl_split"])
def test_an_over_long_line_is_refused_without_being_read(tmp_path, reader):
    """Every JSONL reader (train --data, train --hf-model --data, quantize --data, held-out) reads
    through `runtime.lines`: a 20 MB line is refused naming the file and line, having read a line
    limit of it, not the whole line."""
    import re

    from attndeploy.data import jsonl
    from attndeploy.runtime.lines import MAX_JSONL_LINE_BYTES
    from tests.long_lines import long_line_file, refused_within_memory

    path = long_line_file(tmp_path / "data.jsonl",
                          before=(json.dumps({"text": "a b", "label": "x"}) + "\n").encode(),
                          line=b'{"text": "' + b"w" * 64)
    call = {"read_jsonl": lambda: jsonl.read_jsonl(path),
            "load_jsonl": lambda: jsonl.load_jsonl(path),
            "load_jsonl_split": lambda: jsonl.load_jsonl_split(path, eval_fraction=0.5, seed=0)}
    refused_within_memory(call[reader], DataError,
                          rf"^line 2 of {re.escape(str(path))} has more than "
                          rf"{MAX_JSONL_LINE_BYTES} bytes, the limit per JSONL line")


def test_a_line_holding_any_text_predict_takes_is_read(tmp_path):
    """The JSONL limit leaves room for a text at the limit per text, however escaped: here every
    character a control character, written as \\u0001 (six bytes for each byte of text)."""
    from attndeploy.runtime.lines import MAX_TEXT_BYTES

    text = "\x01" * (MAX_TEXT_BYTES - 2) + "ab"
    path = write(tmp_path, [json.dumps({"text": text, "label": "x" * 1000}),
                            json.dumps({"text": "c d", "label": "y"})])
    assert read_jsonl(path)[0][0] == text


def test_a_line_nested_deep_is_one_error_naming_its_line(tmp_path):
    """Python's parser gives up on deep nesting with a RecursionError; the one JSON reader
    (`attndeploy.jsonread`) makes it, and any nesting past its limit, a DataError."""
    for deep in ("[" * 100_000 + "]" * 100_000, '{"text": ' + "[" * 100 + "]" * 100 + "}"):
        path = write(tmp_path, [json.dumps({"text": "a", "label": "x"}), deep])
        with pytest.raises(DataError, match=r"data\.jsonl:2 nests JSON more than 64 levels"):
            read_jsonl(path)
