"""Reading tagged data for `train --data FILE`: JSONL lines `{"tokens": [...], "tags": [...]}` or
a CoNLL column file (`attndeploy.data.conll`), the tags checked against their scheme
(`scheme.py`) with the line of any forbidden one.

An example's text is its tokens joined by spaces and its target a `TagTarget` (the tags and the
file:line of each). The splitting rule that turns raw text back into those tokens is chosen once,
from the whole file, and stored in the tokenizer record (`tokenizer_class`): characters
(`CharTokenizer`) when every token is one character (MSRA); words (`WordTokenizer`, the built-in
rule) when every token is one word of it; else white space (`SpaceTokenizer`: CoNLL-2003's
`1996-08-22`). `predict` and the served text model split raw text by the stored rule, so it is
never guessed again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from attndeploy.data.conll import read_conll
from attndeploy.data.tokenizer import CharTokenizer, SpaceTokenizer, WordTokenizer
from attndeploy.errors import DataError
from attndeploy.families.token_classification.scheme import OUTSIDE, check_tags, scheme_of

JSONL_KEYS: tuple[str, ...] = ("tokens", "tags")
# A file with one of these suffixes is a CoNLL column file (`read_file`), not JSONL.
FILE_SUFFIXES: tuple[str, ...] = (".conll", ".txt", ".bio", ".bmes", ".bioes", ".iob", ".tsv")


class TagTarget(NamedTuple):
    """One example's tags and where each one was read ("FILE:LINE"), for messages."""

    tags: tuple[str, ...]
    where: tuple[str, ...]


def _check_tokens(tokens: Sequence[str], where: Sequence[str]) -> None:
    for token, at in zip(tokens, where, strict=True):
        if not token or any(char.isspace() for char in token):
            raise DataError(f"{at}: token {token!r} is empty or holds white space")


def read_example(obj: dict[str, Any], where: str) -> tuple[str, TagTarget]:
    """(text, target) of one JSONL object {"tokens": [...], "tags": [...]}; DataError naming
    `where` (file:line)."""
    for key in JSONL_KEYS:
        if key not in obj:
            raise DataError(f"{where}: missing {key!r}")
    tokens, tags = obj["tokens"], obj["tags"]
    for key, value in (("tokens", tokens), ("tags", tags)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DataError(f"{where}: {key!r} must be a list of strings")
    if not tokens:
        raise DataError(f"{where}: no tokens; every example needs at least one")
    if len(tokens) != len(tags):
        raise DataError(f"{where}: {len(tokens)} tokens but {len(tags)} tags; one tag a token")
    at = [f"{where} (token {i})" for i in range(len(tokens))]
    _check_tokens(tokens, at)
    if not all(tags):
        raise DataError(f"{where}: empty tag")
    return " ".join(tokens), TagTarget(tuple(tags), tuple(at))


def read_file(path: Path) -> list[tuple[int, str, TagTarget]]:
    """(line, text, target) of every sentence of a CoNLL column file (`FILE_SUFFIXES`)."""
    records = []
    for sentence in read_conll(path):
        where = tuple(f"{path}:{number}" for number in sentence.lines)
        _check_tokens(sentence.tokens, where)
        records.append((sentence.lines[0], " ".join(sentence.tokens),
                        TagTarget(sentence.tags, where)))
    return records


def label_names_of(targets: Sequence[TagTarget], path: Any) -> tuple[str, ...]:
    """The file's tags, `O` first then sorted, after checking every sentence against the file's
    scheme (BIO, BIOES/BMES or plain; DataError naming the line of a forbidden tag)."""
    distinct = {tag for target in targets for tag in target.tags}
    try:
        scheme = scheme_of(distinct)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    for target in targets:
        check_tags(target.tags, target.where, scheme)
    names = ([OUTSIDE] if OUTSIDE in distinct else []) + sorted(distinct - {OUTSIDE})
    if len(names) < 2:
        raise DataError(f"{path}: needs at least 2 distinct tags to train a tagger; found only "
                        f"{names!r}")
    return tuple(names)


def label_encoder(label_names: tuple[str, ...]) -> Callable[[TagTarget, str], list[int]]:
    """target, where -> its tag indices; a tag outside `label_names` fails at its line."""
    ids = {name: index for index, name in enumerate(label_names)}

    def encode(target: TagTarget, where: str) -> list[int]:
        for tag, at in zip(target.tags, target.where, strict=True):
            if tag not in ids:
                raise DataError(f"{at}: tag {tag!r} is not one of {', '.join(label_names)}")
        return [ids[tag] for tag in target.tags]
    return encode


def jsonl_line(text: str, target: TagTarget | Sequence[str]) -> dict[str, Any]:
    """The JSONL line of one example: {"tokens", "tags"} (held-out splits written back); the
    target a `TagTarget` or the tag names alone (a built-in task's)."""
    tags = target.tags if isinstance(target, TagTarget) else target
    return {"tokens": text.split(" "), "tags": list(tags)}


def tokenizer_class(records: Sequence[tuple[int, str, TagTarget]], path: Any
                    ) -> type[WordTokenizer]:
    """The splitting rule of a whole file (the module docstring): `CharTokenizer` when every
    token is one character, `WordTokenizer` when every token is one word of its rule, else
    `SpaceTokenizer`."""
    tokens = [token for _, text, _ in records for token in text.split(" ")]
    if all(len(token) == 1 for token in tokens):
        return CharTokenizer
    if all(WordTokenizer.tokenize(token) == [token.lower()] for token in tokens):
        return WordTokenizer
    return SpaceTokenizer
