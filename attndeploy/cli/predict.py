"""`attndeploy predict`: run an exported model in this process on texts (no server, no torch)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.output import console, error_console
from attndeploy.runtime import DEFAULT_BATCH_SIZE

PROGRESS_MIN_TEXTS = 300  # more texts than this get a progress bar (on stderr)
STDIN = Path("-")


def command(
    model: Annotated[Path, typer.Argument(help="ONNX file written by `attndeploy export`.")],
    text: Annotated[
        list[str] | None, typer.Option("--text", help="A text to classify (repeatable).")
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="Texts, one per line ('-' reads stdin).")
    ] = None,
    batch_size: Annotated[
        int, typer.Option(help="Texts per onnxruntime call.")
    ] = DEFAULT_BATCH_SIZE,
    truncate: Annotated[
        bool, typer.Option("--truncate", help="Cut texts longer than the model's max_seq.")
    ] = False,
    threads: Annotated[
        int | None, typer.Option(help="onnxruntime intra-op threads [default: one per core].")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per text (JSON lines).")
    ] = False,
) -> None:
    """Label texts with an exported model: label, scores and (GA-Net) the attended tokens."""
    from attndeploy.errors import DataError
    from attndeploy.runtime.model import InferenceModel
    from attndeploy.runtime.text import TextError

    text = list(text) if text else None  # Typer hands an empty list when --text is absent
    if (text is None) == (file is None):
        both = ", not both" if text is not None else ""
        raise DataError("give texts with --text \"...\" (repeatable) or --file lines.txt "
                        f"('-' reads stdin){both}")
    runner = InferenceModel(model, threads=threads)
    texts = text if text is not None else read_lines(file)
    if not texts:
        raise DataError(f"{describe(file)} holds no text")
    try:
        predictions = run_with_progress(runner, texts, batch_size, truncate)
    except TextError as exc:
        where = f"--text #{exc.index + 1}" if file is None else (
            f"line {exc.index + 1} of {describe(file)}")
        hint = "; shorten it or pass --truncate" if exc.too_long else ""
        raise DataError(f"{where} {exc.reason}{hint}") from None
    if json_output:
        out = sys.stdout
        for index, prediction in enumerate(predictions):
            out.write(json.dumps({"index": index, **prediction.to_dict()}) + "\n")
        return
    print_table(texts, predictions, gated=runner.gated, tagging=runner.head == "tagging")


def describe(file: Path | None) -> str:
    return "stdin" if file == STDIN else str(file)


def read_lines(file: Path) -> list[str]:
    """The file's lines (stdin for '-'), without line ends; a final newline adds no line."""
    from attndeploy.errors import DataError

    if file == STDIN:
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    else:
        if file.is_dir():
            raise DataError(f"{file} is a folder; --file takes a text file, one text a line")
        if not file.is_file():
            raise DataError(f"no such file: {file}")
        data = file.read_bytes()
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DataError(f"{describe(file)} is not UTF-8 text (bad byte at offset "
                            f"{exc.start})") from None
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def run_with_progress(runner, texts: list[str], batch_size: int, truncate: bool) -> list:
    """`runner.predict`, with a progress bar for more than PROGRESS_MIN_TEXTS texts (on stderr,
    and only when stderr is a terminal: a log or a pipe gets nothing)."""
    if len(texts) <= PROGRESS_MIN_TEXTS:
        return runner.predict(texts, batch_size=batch_size, truncate=truncate)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("[bold]predict"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=error_console, transient=True,
                   disable=not error_console.is_terminal)
    with bar:
        task = bar.add_task("texts", total=len(texts))
        return runner.predict(texts, batch_size=batch_size, truncate=truncate,
                              progress=lambda done: bar.advance(task, done))


def print_table(texts: list[str], predictions: list, *, gated: bool, tagging: bool) -> None:
    """One row per text: its label and top score (tagging: token/tag pairs), GA-Net's attended
    tokens, and the text (shortened to the terminal)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    table.add_column("#", justify="right")
    if tagging:
        table.add_column("tokens/tags")
    else:
        table.add_column("label")
        table.add_column("score", justify="right")
    if gated:
        table.add_column("attended")
    if not tagging:
        table.add_column("text", no_wrap=True, overflow="ellipsis", max_width=60)
    for index, (text, p) in enumerate(zip(texts, predictions, strict=True)):
        if tagging:
            row = [" ".join(f"{tok}/{tag}" for tok, tag in zip(p.tokens, p.tags, strict=True))]
        else:
            row = [p.label, f"{float(p.scores.max()):.4f}"]
        if gated:
            row.append(" ".join(p.attended))
        if not tagging:
            row.append(" ".join(text.split()))
        table.add_row(str(index), *(escape(cell) for cell in row))
    console.print(table)
