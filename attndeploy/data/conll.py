"""The CoNLL column format, as named-entity sets ship: one token a line, its tag in the last
column, a blank line between sentences.

    中 B-ORG          EU NNP B-NP B-ORG
    国 E-ORG          rejects VBZ B-VP O
                     ...
    人 O

Columns are split on white space, so a token holds none; the first column is the token, the last
the tag (CoNLL-2003's middle columns, POS and chunk tags, are skipped). `-DOCSTART-` lines are
document marks, not tokens. Windows line ends are accepted (MSRA's files have them). A line with
one column fails naming it. Tags are returned as written: their scheme is the tagging family's
(`attndeploy.families.token_classification.scheme`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attndeploy.errors import DataError

DOCSTART = "-DOCSTART-"
MAX_CONLL_LINE_BYTES = 4096  # a token and its tags; a longer line is no column file


@dataclass(frozen=True)
class Sentence:
    """One sentence of a column file: its tokens, their tags and each token's line number."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    lines: tuple[int, ...]


def read_conll(path: Path) -> list[Sentence]:
    """Every sentence of a CoNLL column file, in file order; DataError naming the file (and the
    line) when it is missing, malformed or holds no sentence."""
    from attndeploy.runtime import lines as text_lines

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    numbers: list[int] = []

    def close() -> None:
        if tokens:
            sentences.append(Sentence(tuple(tokens), tuple(tags), tuple(numbers)))
            tokens.clear()
            tags.clear()
            numbers.clear()

    reader = text_lines.LineReader(path, limit=MAX_CONLL_LINE_BYTES,
                                   unit="column line (a token and its tag)")
    with reader:
        for number, line in enumerate(reader, start=1):
            columns = line.split()
            if not columns:
                close()
                continue
            if columns[0] == DOCSTART:
                close()
                continue
            if len(columns) < 2:
                raise DataError(f"{path}:{number}: expected a token and its tag separated by "
                                f"white space; got {line.strip()[:40]!r}")
            tokens.append(columns[0])
            tags.append(columns[-1])
            numbers.append(number)
    close()
    if not sentences:
        raise DataError(f"{path}: no sentences (the file is empty or blank)")
    return sentences
