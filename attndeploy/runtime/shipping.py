"""The runtime's own source files, for a process that cannot import attndeploy.

A served text model (`attndeploy package` writes `<name>_text`) runs inside Triton's python
backend, where attndeploy is not installed (an NGC Triton container has Python, numpy and the
backend, nothing more). It still tokenizes and decodes with THIS package's code: the packager
copies the files below, byte for byte, next to the model's `model.py`, and the model loads them
under their own module names. So there is one implementation, shipped, not a second one written
by hand; `attndeploy check-repo` refuses copies that differ from the installed files.

`SHIPPED_MODULES` lists every module the copies import (the runtime's own imports are only
these, the standard library, numpy and the packages `TOKENIZER_TYPES` requires, imported on
first use), in an order in which each one's imports come first.

`TOKENIZER_TYPES` tells a served model which class reads a tokenizer record (the JSON object in
the ONNX metadata key `attndeploy.tokenizer`, `{"type": ..., ...}`) and which third-party package
that class needs in the server's Python: "word" (`WordTokenizer`, numpy only; "char" and
"space" are its one-character and white-space splitting rules, for tagged sets) and "wordpiece"
(`WordPieceTokenizer` of converted Hugging Face models, which needs `tokenizers`). In-process
inference (`runtime.metadata`) builds tokenizers from the same table. A new tokenizer plugs in as
one entry here plus its module in `SHIPPED_MODULES`; a served model whose server lacks the
package fails at load, naming it.

A text model also ships its model FAMILY's runtime part (`attndeploy/families/<package>/runtime.py`:
decode and the wire codec of the family's fields; `family_runtime_shipment`), the one module it
adds to `SHIPPED_MODULES`, loaded after them. Its path in the copy is derived from the module's
own file and name, so a plug-in family's part ships from wherever its attndeploy is installed.

`tokenizer_from_record` is the one rule that turns a record into a tokenizer in this package
(in-process inference and the packager's check of a text model's record); the generated
`model.py` applies the same table in the server, where attndeploy cannot be imported.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

from attndeploy.echo import echo
from attndeploy.errors import DataError

# (module name, path relative to the folder that holds the `attndeploy` package), imports first.
SHIPPED_MODULES: tuple[tuple[str, str], ...] = (
    ("attndeploy", "attndeploy/__init__.py"),
    ("attndeploy.errors", "attndeploy/errors.py"),
    ("attndeploy.runtime", "attndeploy/runtime/__init__.py"),
    ("attndeploy.runtime.tokenizer", "attndeploy/runtime/tokenizer.py"),
    ("attndeploy.runtime.wordpiece", "attndeploy/runtime/wordpiece.py"),
    ("attndeploy.runtime.contract", "attndeploy/runtime/contract.py"),
    ("attndeploy.runtime.text", "attndeploy/runtime/text.py"),
)


@dataclass(frozen=True)
class TokenizerType:
    """How a served model builds a tokenizer from its record: `module.cls.from_dict(record)`;
    `requires` names a third-party package that must be importable first (None: numpy only)."""

    module: str
    cls: str
    requires: str | None = None


TOKENIZER_TYPES: dict[str, TokenizerType] = {
    "word": TokenizerType("attndeploy.runtime.tokenizer", "WordTokenizer"),
    "char": TokenizerType("attndeploy.runtime.tokenizer", "CharTokenizer"),
    "space": TokenizerType("attndeploy.runtime.tokenizer", "SpaceTokenizer"),
    "wordpiece": TokenizerType("attndeploy.runtime.wordpiece", "WordPieceTokenizer",
                               requires="tokenizers"),
}


class UnknownTokenizerType(DataError):
    """A tokenizer record whose "type" is none of `TOKENIZER_TYPES` (or that is no object)."""


class MissingTokenizerPackage(DataError):
    """A tokenizer type whose class needs a package this Python cannot import."""

    def __init__(self, message: str, package: str) -> None:
        super().__init__(message)
        self.package = package


def tokenizer_from_record(record: Any) -> Any:
    """The tokenizer a record describes, built by the class `TOKENIZER_TYPES` names for its
    "type" (`cls.from_dict(record)`, whose own errors propagate); UnknownTokenizerType (naming
    the known types) or MissingTokenizerPackage first when it cannot be built here."""
    kind = record.get("type") if isinstance(record, dict) else None
    entry = TOKENIZER_TYPES.get(kind) if isinstance(kind, str) else None
    if entry is None:
        what = (f"type {echo(repr(kind))}" if isinstance(record, dict)
                else f"a {type(record).__name__}")
        raise UnknownTokenizerType(f"unknown tokenizer {what}; this attndeploy reads "
                                   f"{', '.join(sorted(TOKENIZER_TYPES))}")
    if entry.requires is not None:
        try:
            importlib.import_module(entry.requires)
        except ImportError:
            raise MissingTokenizerPackage(
                f"the {kind!r} tokenizer needs the Python package {entry.requires!r}: pip "
                f"install {entry.requires}", entry.requires) from None
    return getattr(importlib.import_module(entry.module), entry.cls).from_dict(record)


def runtime_sources() -> dict[str, bytes]:
    """{relative path: bytes} of every file in `SHIPPED_MODULES`, read from this installation."""
    root = resources.files("attndeploy")
    sources = {}
    for _, relative in SHIPPED_MODULES:
        parts = relative.split("/")[1:]  # below the `attndeploy` package itself
        sources[relative] = root.joinpath(*parts).read_bytes()
    return sources


@dataclass(frozen=True)
class ShippedModule:
    """One module copied beside a text model: its name, its path relative to the folder that
    holds its top-level package (as in `SHIPPED_MODULES`), and its bytes."""

    name: str
    relative: str
    content: bytes


def family_runtime_shipment(module: ModuleType) -> ShippedModule:
    """The copy of a family's runtime part (`runtime.families.runtime_part`) a text model
    ships: the module's file, placed by its dotted name (`a.b.c` -> `a/b/c.py`, a package's
    `a/b/__init__.py`) below the folder that holds its top-level package."""
    path = Path(module.__file__ or "")
    depth = module.__name__.count(".") + (1 if path.name == "__init__.py" else 0)
    relative = path.relative_to(path.parents[depth]).as_posix()
    return ShippedModule(module.__name__, relative, path.read_bytes())
