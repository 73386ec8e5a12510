"""Tagged data for `train --data FILE`: CoNLL columns and tagging JSONL, BIO and BIOES/BMES
checked with the line of a forbidden tag, and the splitting rule stored in the tokenizer record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attndeploy.data.conll import read_conll
from attndeploy.data.jsonl import load_jsonl, load_jsonl_split
from attndeploy.data.tokenizer import CharTokenizer, SpaceTokenizer, tokenizer_from_dict
from attndeploy.errors import DataError
from attndeploy.families.token_classification.scheme import BIO, BIOES, PLAIN, scheme_of
from attndeploy.runtime.shipping import tokenizer_from_record

BMES = "北 B-LOC\r\n京 E-LOC\r\n是 O\r\n\r\n张 S-PER\r\n三 O\r\n"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_conll_file_is_read_as_sentences_with_each_token_s_line(tmp_path) -> None:
    path = _write(tmp_path / "a.conll", "-DOCSTART- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O"
                  "\n\n\nPeter B-PER\nBlackburn I-PER\n")
    sentences = read_conll(path)
    assert [s.tokens for s in sentences] == [("EU", "rejects"), ("Peter", "Blackburn")]
    assert [s.tags for s in sentences] == [("B-ORG", "O"), ("B-PER", "I-PER")]
    assert sentences[1].lines == (7, 8)


def test_a_line_without_a_tag_is_refused_naming_it(tmp_path) -> None:
    path = _write(tmp_path / "a.conll", "EU B-ORG\nrejects\n")
    with pytest.raises(DataError, match=r"a\.conll:2: expected a token and its tag"):
        read_conll(path)


def test_a_character_level_bmes_file_trains_a_character_tokenizer(tmp_path) -> None:
    dataset, tokenizer = load_jsonl(_write(tmp_path / "msra.txt", BMES))
    assert isinstance(tokenizer, CharTokenizer)
    assert dataset.head == "tagging"
    assert dataset.label_names == ("O", "B-LOC", "E-LOC", "S-PER")
    assert dataset.labels[0].tolist() == [1, 2, 0]
    assert tokenizer.tokenize("北京 是") == ["北", "京", "是"]
    record = tokenizer.to_dict()
    assert record["type"] == "char"
    assert isinstance(tokenizer_from_dict(record), CharTokenizer)
    assert type(tokenizer_from_record(record)).__name__ == "CharTokenizer"  # the served rule


def test_tagging_jsonl_is_read_and_its_words_kept_by_the_word_rule(tmp_path) -> None:
    lines = [{"tokens": ["John", "lives", "in", "New", "York"],
              "tags": ["B-PER", "O", "O", "B-LOC", "I-LOC"]},
             {"tokens": ["Mary", "sings"], "tags": ["B-PER", "O"]}]
    path = _write(tmp_path / "a.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    dataset, tokenizer = load_jsonl(path)
    assert tokenizer.kind == "word"
    assert dataset.label_names == ("O", "B-LOC", "B-PER", "I-LOC")
    assert dataset.labels[0].tolist() == [2, 0, 0, 1, 3]


def test_tokens_the_word_rule_would_split_choose_the_white_space_rule(tmp_path) -> None:
    path = _write(tmp_path / "a.conll", "U.S. B-LOC\ntroops O\n\non O\n1996-08-22 O\n")
    _, tokenizer = load_jsonl(path)
    assert isinstance(tokenizer, SpaceTokenizer)
    assert tokenizer.tokenize("U.S. troops") == ["u.s.", "troops"]


@pytest.mark.parametrize(("text", "line", "why"), [
    ("John B-PER\nSmith I-PER\n\nsings O\nMary I-PER\n", 5, "not begun"),
    ("北 B-LOC\n京 O\n\n张 S-PER\n", 2, "not ended by E-"),
    ("北 B-LOC\n京 M-LOC\n", 2, "ends inside a LOC entity"),
    ("北 B-LOC\n京 E-PER\n", 2, "not begun"),
])
def test_a_tag_the_scheme_forbids_is_reported_with_its_line(tmp_path, text, line, why) -> None:
    with pytest.raises(DataError, match=rf"a\.conll:{line}: .*{why}"):
        load_jsonl(_write(tmp_path / "a.conll", text))


def test_a_jsonl_tag_the_scheme_forbids_names_its_line_and_token(tmp_path) -> None:
    lines = [{"tokens": ["a"], "tags": ["B-X"]}, {"tokens": ["b", "c"], "tags": ["O", "I-X"]}]
    path = _write(tmp_path / "a.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(DataError, match=r"a\.jsonl:2 \(token 1\): tag 'I-X' after 'O'"):
        load_jsonl(path)


def test_schemes_are_read_off_the_tags() -> None:
    assert scheme_of(["O", "B-PER", "I-PER"]) == BIO
    assert scheme_of(["O", "B-PER", "M-PER", "E-PER", "S-LOC"]) == BIOES
    assert scheme_of(["NN", "VB", "O"]) == PLAIN
    with pytest.raises(DataError, match="mix"):
        scheme_of(["B-PER", "NN"])


def test_a_split_keeps_the_file_s_splitting_rule_and_tags(tmp_path) -> None:
    text = "".join(f"{a} B-PER\n{b} E-PER\n{c} O\n\n" for a, b, c in
                   zip("张李王赵钱孙", "三四五六七八", "说是来去走跑", strict=True))
    split = load_jsonl_split(_write(tmp_path / "a.txt", text), eval_fraction=0.34, seed=0)
    assert isinstance(split.tokenizer, CharTokenizer)
    assert split.train.head == split.held_out.head == "tagging"
    assert all(len(doc) == 3 for doc in split.tokens["held_out"])
