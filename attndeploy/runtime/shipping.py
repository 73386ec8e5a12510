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
that class needs in the server's Python: "word" (`WordTokenizer`, numpy only) and "wordpiece"
(`WordPieceTokenizer` of converted Hugging Face models, which needs `tokenizers`). In-process
inference (`runtime.metadata`) builds tokenizers from the same table. A new tokenizer plugs in as
one entry here plus its module in `SHIPPED_MODULES`; a served model whose server lacks the
package fails at load, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

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
    "wordpiece": TokenizerType("attndeploy.runtime.wordpiece", "WordPieceTokenizer",
                               requires="tokenizers"),
}


def runtime_sources() -> dict[str, bytes]:
    """{relative path: bytes} of every file in `SHIPPED_MODULES`, read from this installation."""
    root = resources.files("attndeploy")
    sources = {}
    for _, relative in SHIPPED_MODULES:
        parts = relative.split("/")[1:]  # below the `attndeploy` package itself
        sources[relative] = root.joinpath(*parts).read_bytes()
    return sources
