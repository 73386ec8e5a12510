"""The checks part of a model family (parity, the validation grid, quantize's and debug's checks),
imported by name from its spec (`attndeploy.families.registry`): the one place this layer
imports a family's checks module.

A family's `checks.py` (module-level names; the two built-in families' are the worked examples):

- `PER_TOKEN_OUTPUTS: tuple[str, ...]` (required): the outputs whose dims start `[batch, seq]`
  and whose padded positions mean nothing: they are compared on the real tokens only (validate,
  its padding check, optimize's parity, debug's outputs, quantize). `()` when every output is
  one row per text.
- `AGREEMENT: str` (required): the name of the decision statistic, e.g. `label agreement`;
  `""` when the family compares no decision.
- `agreement(actual, expected) -> np.ndarray | None` (required): whether the model under test
  takes the reference's decision, as bool `[N]`, one per decision; `actual`, `expected` are the
  decision output's rows, float `[N, C]` (one row per text, or per real token for a per-token
  output). None: the family takes no decision (parity is the tolerance rule alone). Reported,
  never pass/fail in validate; quantize's `--min-agreement` holds it.
- `DECISION_OUTPUT: str` (optional, default `logits`): the output `agreement` reads.
- `validation_grid(max_seq) -> tuple[Shape, ...]` (optional, default
  `attndeploy.validate.grid.default_grid`): the shapes `validate` runs when none are given.
- `read_examples(path, labels) -> (texts, gold | None)` (optional, default: the `text` field of
  each JSONL line, no gold): the texts of a data file (`quantize --data`) and, where the family
  can score them, their gold answers, one per text. `read_records(path)` reads the lines.
- `SCORE: str` and `score(outputs, gold) -> float` (optional, with gold): the quality of a
  model's answers on those texts, higher is better (`accuracy`); `outputs` one decision-output
  array per text (`[C]`, or `[T, C]` over its real tokens for a per-token output). quantize
  reports both models' and holds `--max-accuracy-drop` on the difference.

`family_checks(family)` reads those names once into a `FamilyChecks`, the defaults filled in.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from attndeploy.errors import ConfigError, DataError
from attndeploy.families.registry import FamilySpec, family_for_head
from attndeploy.validate.grid import Shape, default_grid

DECISION_OUTPUT = "logits"
# The names every family's checks part defines, and those it may (the docstring above).
REQUIRED = ("PER_TOKEN_OUTPUTS", "AGREEMENT", "agreement")
OPTIONAL = ("DECISION_OUTPUT", "validation_grid", "read_examples", "SCORE", "score")


def checks_part(family: FamilySpec | str) -> ModuleType:
    """The checks module of `family` (a spec, or a head such as `classification`)."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return importlib.import_module(spec.part("checks"))


def read_records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, record) for every non-blank line of a JSONL file, in file order, `where` being
    "FILE:LINE" for messages; each record an object with a string `text` (DataError naming the
    line otherwise, or when the file holds none). What a family's `read_examples` builds on."""
    from attndeploy.jsonread import parse_json
    from attndeploy.runtime import lines as text_lines

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    reader = text_lines.LineReader(path, limit=text_lines.MAX_JSONL_LINE_BYTES,
                                   unit="JSONL line (a text)")
    with reader:
        lines = list(reader)  # a line over the limit is refused before it is read whole
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        record = parse_json(line, where, error=DataError)
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DataError(f'{where}: expected an object with a string "text"')
        records.append((where, record))
    if not records:
        raise DataError(f"{path}: no texts (the file is empty or blank)")
    return records


def read_texts(path: Path) -> list[str]:
    """The `text` of every line of a JSONL file (`read_records`), in file order."""
    return [record["text"] for _, record in read_records(path)]


def _texts_only(path: Path, labels: tuple[str, ...]) -> tuple[list[str], None]:
    return read_texts(path), None


@dataclass(frozen=True)
class FamilyChecks:
    """One family's checks part, read (see the module docstring)."""

    family: str  # the family's name, e.g. `text-classification`
    per_token_outputs: tuple[str, ...]
    agreement_name: str
    agreement: Callable[[np.ndarray, np.ndarray], np.ndarray | None]
    decision_output: str
    validation_grid: Callable[[int], tuple[Shape, ...]]
    read_examples: Callable[[Path, tuple[str, ...]], tuple[list[str], Sequence[Any] | None]]
    score_name: str = ""
    score: Callable[[Sequence[np.ndarray], Sequence[Any]], float] | None = None

    def per_token(self, name: str, value: np.ndarray, valid: np.ndarray | None) -> bool:
        """Whether output `name` (`value`) is compared on the real tokens `valid` [B, T]."""
        value = np.asarray(value)
        return (name in self.per_token_outputs and valid is not None
                and value.shape[:2] == np.shape(valid))

    def decision_rows(self, name: str, value: np.ndarray, valid: np.ndarray | None
                      ) -> np.ndarray:
        """The rows one decision each is taken on: `[B, ...]`, or `[N, ...]` (real tokens) for
        a per-token output."""
        value = np.asarray(value)
        return value[np.asarray(valid, bool)] if self.per_token(name, value, valid) else value


def family_checks(family: FamilySpec | str) -> FamilyChecks:
    """`family`'s checks part (a spec or a head), read into a `FamilyChecks`."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return read_checks(spec.name, checks_part(spec))


def read_checks(name: str, module: ModuleType) -> FamilyChecks:
    """The checks part `module` of the family `name`, read (its defaults filled in);
    ConfigError naming what a required name it lacks."""
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise ConfigError(f"{module.__name__} (family {name!r}) lacks {', '.join(missing)}; "
                          "see attndeploy.validate.families")
    score = getattr(module, "score", None)
    return FamilyChecks(
        family=name,
        per_token_outputs=tuple(module.PER_TOKEN_OUTPUTS),
        agreement_name=module.AGREEMENT,
        agreement=module.agreement,
        decision_output=getattr(module, "DECISION_OUTPUT", DECISION_OUTPUT),
        validation_grid=getattr(module, "validation_grid", default_grid),
        read_examples=getattr(module, "read_examples", _texts_only),
        score_name=getattr(module, "SCORE", "") if score is not None else "",
        score=score,
    )
