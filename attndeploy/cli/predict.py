"""`attndeploy predict`: run an exported model in this process on texts (no server, no torch).

Texts stream: `--text-file` (a file, a pipe, or '-' for stdin) is read CHUNK_TEXTS lines at a
time, each chunk is run and its results printed (and flushed) before the next chunk is read, so
memory stays flat, the first results show at once and a Ctrl-C keeps every chunk already
printed. `--jsonl` prints one record a line as it goes; `--json` prints one JSON document,
`{"model": ..., "predictions": [...]}`, streamed the same way (the closing brackets come after
the last chunk). Indices (each record's `index`, the `#` of the table) count from the first line
of the input across chunks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.cli.options import JsonFlag, shared
from attndeploy.cli.output import console, error_console
from attndeploy.runtime import DEFAULT_BATCH_SIZE
from attndeploy.runtime.contract import CONTRACT_VERSION
from attndeploy.runtime.lines import LineReader as FileLines

CHUNK_TEXTS = 2048  # texts read, run and printed at a time (InferenceModel sorts each by length)
PROGRESS_MIN_TEXTS = 300  # an input whose first chunk holds more texts gets a bar (on stderr)
STDIN = Path("-")
TEXT_MAX_WIDTH = 60  # the table's text column, in cells (longer texts end in an ellipsis)
INDEX_WIDTH = 7  # the table's "#" column when more chunks may follow (up to 9,999,999 texts)


def command(
    model: Annotated[Path, typer.Argument(help="ONNX file written by `attndeploy export`.")],
    text: Annotated[list[str] | None, shared("--text", "Repeatable.")] = None,
    file: Annotated[
        Path | None, shared("--text-file", "Read, run and printed a chunk at a time.")
    ] = None,
    batch_size: Annotated[
        int, shared("--batch-size", "(Texts per onnxruntime call.)")
    ] = DEFAULT_BATCH_SIZE,
    truncate: Annotated[bool, shared("--truncate")] = False,
    threads: Annotated[int | None, shared("--threads", "[default: one per core].")] = None,
    json_output: JsonFlag = False,
    jsonl_output: Annotated[bool, shared("--jsonl", "One record per text.")] = False,
    image: Annotated[list[Path] | None, typer.Option(
        "--image-file", help="An image file (PNG or JPEG) for an image model; repeatable.")] = None,
) -> None:
    """Label texts with an exported model: label, probabilities and (GA-Net) the attended
    tokens; --json or --jsonl print the prediction contract's records. An image model labels
    --image-file files."""
    from attndeploy.errors import DataError
    from attndeploy.runtime.model import InferenceModel
    from attndeploy.runtime.text import TextError

    text = list(text) if text else None  # Typer hands an empty list when --text is absent
    if image:
        if text is not None or file is not None:
            raise DataError("give --image-file files or texts, not both")
        if json_output and jsonl_output:
            raise DataError("give --json (one document) or --jsonl (one record a line), "
                            "not both")
        predict_images(model, list(image), batch_size=batch_size, threads=threads,
                       json_output=json_output, jsonl_output=jsonl_output)
        return
    if (text is None) == (file is None):
        both = ", not both" if text is not None else ""
        raise DataError("give texts with --text \"...\" (repeatable) or --text-file lines.txt "
                        f"('-' reads stdin){both}")
    if json_output and jsonl_output:
        raise DataError("give --json (one document) or --jsonl (one record a line), not both")
    runner = InferenceModel(model, threads=threads)  # ModelError: `error (model): ...`
    lines = LineReader(file) if file is not None else None
    texts: Iterator[str] = iter(text) if lines is None else iter(lines)
    printer: Callable[[int, list[str], list], None] = (
        print_json_lines if jsonl_output
        else JsonDocumentPrinter(model) if json_output
        else TablePrinter(gated=runner.gated, family=runner.metadata.runtime))
    done = 0
    with lines if lines is not None else nullcontext(), ChunkProgress(lines) as bar:
        while chunk := list(islice(texts, CHUNK_TEXTS)):
            bar.start(len(chunk))
            try:
                predictions = runner.predict(chunk, batch_size=batch_size, truncate=truncate,
                                             progress=bar.advance)
            except TextError as exc:
                where = f"--text #{exc.index + 1}" if lines is None else (
                    f"line {done + exc.index + 1} of {lines.name}")
                hint = "; shorten it or pass --truncate" if exc.too_long else ""
                raise DataError(f"{where} {exc.reason}{hint}") from None
            printer(done, chunk, predictions)
            sys.stdout.flush()  # a chunk's results are out before the next chunk is read
            done += len(chunk)
    if done == 0:
        raise DataError(f"{describe(file)} holds no text")
    if isinstance(printer, JsonDocumentPrinter):
        printer.close()


def predict_images(model: Path, images: list[Path], *, batch_size: int, threads: int | None,
                   json_output: bool, jsonl_output: bool) -> None:
    """Label image files with an image model, in process and without torch: a table of label,
    probability and file, or the records (--json one document, --jsonl one a line)."""
    from attndeploy.families.image_classification.predict import ImageClassifier

    records = ImageClassifier(model, threads=threads).predict(
        [str(path) for path in images], batch_size=batch_size)
    if jsonl_output:
        for record in records:
            print(json.dumps(record, ensure_ascii=False))
        return
    if json_output:
        print(json.dumps({"model": str(model), "contract_version": CONTRACT_VERSION,
                          "predictions": records}, ensure_ascii=False, indent=2))
        return
    for record in records:
        probability = record["probabilities"][record["label"]]
        console.print(f"{record['label']}\t{probability:.4f}\t{record['image']}",
                      highlight=False, markup=False)


def describe(file: Path | None) -> str:
    return "stdin" if file == STDIN else str(file)


# --------------------------------------------------------------------------- reading


class LineReader(FileLines):
    """The lines of `--text-file` (stdin for '-'), read lazily by the one reader of text files
    (`attndeploy.runtime.lines`: a line over the limit per text is refused without being read
    whole, bytes that are not UTF-8 name their offset and line).

    Checks the file when made (DataError: missing, a folder, stdin closed). Use as a context
    manager to close the file.
    """

    def __init__(self, file: Path) -> None:
        from attndeploy.errors import DataError

        if file == STDIN:
            stream = sys.stdin
            if stream is None:  # started with stdin closed (`<&-`)
                raise DataError("stdin is closed: pipe the texts in (`... | attndeploy predict "
                                "MODEL --text-file -`) or give --text-file lines.txt")
            super().__init__(getattr(stream, "buffer", stream), describe(file))
            return
        if file.is_dir():
            raise DataError(f"{file} is a folder; --text-file takes a text file, one text a "
                            "line")
        if not file.exists():  # a pipe (`--text-file <(...)`) is read like a file
            raise DataError(f"no such file: {file}")
        super().__init__(file, describe(file))


# --------------------------------------------------------------------------- progress


class ChunkProgress:
    """A transient bar on stderr while texts run: texts done and, for a file, the share of it
    read. Shown only when stderr is a terminal and stdout is not (a terminal then sees the
    results themselves as they come), and only for an input longer than PROGRESS_MIN_TEXTS
    (decided on the first chunk: a shorter first chunk is all there is)."""

    def __init__(self, lines: LineReader | None) -> None:
        self.lines = lines
        self.bar: Any = None
        self.task: Any = None
        self.texts = 0
        self.enabled = (lines is not None and error_console.is_terminal
                        and not console.is_terminal)

    def __enter__(self) -> ChunkProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def start(self, chunk_texts: int) -> None:
        """A chunk of `chunk_texts` texts is about to run (the first one may start the bar)."""
        if self.bar is None and self.enabled and chunk_texts > PROGRESS_MIN_TEXTS:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            # redirect_stdout=False: results go to stdout as they are, never through the bar
            self.bar = Progress(TextColumn("[bold]predict"), BarColumn(),
                                TextColumn("{task.description}"), TimeElapsedColumn(),
                                console=error_console, transient=True, redirect_stdout=False,
                                redirect_stderr=False)
            size = self.lines.size if self.lines is not None else None
            self.task = self.bar.add_task("", total=size or None)
            self.bar.start()
        self._update()

    def advance(self, texts: int) -> None:
        """`InferenceModel.predict`'s callback: a batch of `texts` texts is done."""
        self.texts += texts
        self._update()

    def _update(self) -> None:
        if self.bar is None:
            return
        lines = self.lines
        read = lines.offset if lines is not None else 0
        share = f", {read / lines.size:.0%} of {lines.name} read" if (
            lines is not None and lines.size) else ""
        self.bar.update(self.task, completed=read, description=f"{self.texts:,} texts{share}")


# --------------------------------------------------------------------------- printing


def _record(index: int, prediction: Any) -> dict[str, Any]:
    """One prediction's JSON record: its index among the texts, the prediction contract's
    version (so a consumer can check what it reads) and the contract's fields."""
    return {"index": index, "contract_version": CONTRACT_VERSION, **prediction.to_dict()}


def print_json_lines(start: int, texts: list[str], predictions: list) -> None:
    """One JSON object per text, `index` counting from the input's first text."""
    out = sys.stdout
    for index, prediction in enumerate(predictions, start):
        out.write(json.dumps(_record(index, prediction)) + "\n")


class JsonDocumentPrinter:
    """`--json`: one document, `{"model": ..., "predictions": [...]}`, written a chunk at a
    time (the records as `--jsonl`'s, each with the contract version); `close()` ends it."""

    def __init__(self, model: Path) -> None:
        self.head = '{"model": ' + json.dumps(str(model)) + ', "predictions": ['
        self.first = True

    def __call__(self, start: int, texts: list[str], predictions: list) -> None:
        out = sys.stdout
        if self.first:
            out.write(self.head)
        for index, prediction in enumerate(predictions, start):
            out.write(("" if self.first else ", ")
                      + json.dumps(_record(index, prediction)))
            self.first = False

    def close(self) -> None:
        sys.stdout.write((self.head if self.first else "") + "]}\n")


class TablePrinter:
    """The table, one chunk at a time: one row per text with the columns of the model's family
    (its runtime part's `TABLE_COLUMNS` and `table_cells`: classification's label and top score,
    tagging's token/tag pairs), GA-Net's attended tokens and, when the family shows it
    (`TABLE_TEXT`), the text (shortened).

    The header is printed with the first chunk only, and every chunk's table takes the column
    widths the first chunk set, so the chunks read as one table. `tagging=` (the argument before
    families) picks the built-in tagging or classification family."""

    def __init__(self, *, gated: bool, family: Any = None, tagging: bool | None = None) -> None:
        from attndeploy.runtime.contract import _family

        self.gated, self.family = gated, _family(family, tagging)
        self.widths: list[int] | None = None

    @property
    def shows_text(self) -> bool:
        return bool(self.family.TABLE_TEXT)

    def headers(self) -> list[str]:
        names = ["#", *self.family.TABLE_COLUMNS]
        names += ["attended"] if self.gated else []
        return names + (["text"] if self.shows_text else [])

    def rows(self, start: int, texts: Sequence[str], predictions: Sequence) -> list[list[str]]:
        rows = []
        for index, (text, p) in enumerate(zip(texts, predictions, strict=True), start):
            row = list(self.family.table_cells(p))
            if self.gated:
                row.append(" ".join(p.attended))
            if self.shows_text:
                row.append(" ".join(text.split()))
            rows.append([str(index), *row])
        return rows

    def __call__(self, start: int, texts: list[str], predictions: list) -> None:
        from rich.cells import cell_len
        from rich.markup import escape
        from rich.table import Table

        headers, rows = self.headers(), self.rows(start, texts, predictions)
        first = self.widths is None
        if self.widths is None:
            self.widths = [max(cell_len(cell) for cell in [name, *column])
                           for name, column in zip(headers, zip(*rows, strict=True),
                                                   strict=True)]
            if len(texts) == CHUNK_TEXTS:  # more chunks may follow: room for their indices
                self.widths[0] = max(self.widths[0], INDEX_WIDTH)
            if self.shows_text:
                self.widths[-1] = min(self.widths[-1], TEXT_MAX_WIDTH)
            self.widths = fit_widths(headers, self.widths, console.width,
                                     wrapping=(*FLEXIBLE_COLUMNS, *self.family.TABLE_FLEXIBLE))
        table = Table(show_edge=False, pad_edge=False, show_header=first)
        for name, width in zip(headers, self.widths, strict=True):
            if name == "text":
                table.add_column(name, width=width, no_wrap=True, overflow="ellipsis")
            else:
                table.add_column(name, width=width,
                                 justify="right" if name in ("#", "score") else "left")
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)


FLEXIBLE_COLUMNS = ("attended", "text")  # they wrap or end in an ellipsis (and a family's own)
FLEXIBLE_MIN_WIDTH = 10


def fit_widths(headers: list[str], widths: list[int], room: int,
               wrapping: Sequence[str] = FLEXIBLE_COLUMNS) -> list[int]:
    """Column widths whose row fits `room` cells: the `wrapping` columns (the attended tokens,
    the text, a family's wrapping columns) give up room in proportion to their widths (each
    keeps at least FLEXIBLE_MIN_WIDTH); the others (index, label, probability) keep theirs.
    (Left to rich, a narrow console cut the label to "fon…".)"""
    flexible = [i for i, name in enumerate(headers) if name in wrapping]
    separators = 3 * (len(widths) - 1)  # " │ " between columns (no edge, no edge padding)
    spare = room - separators - sum(w for i, w in enumerate(widths) if i not in flexible)
    wanted = sum(widths[i] for i in flexible)
    if wanted <= spare:
        return widths
    floor = min(FLEXIBLE_MIN_WIDTH, max(1, spare // len(flexible)))  # a very narrow console
    fitted = list(widths)
    for i in flexible:
        fitted[i] = min(widths[i], floor)
    left, beyond = spare - sum(fitted[i] for i in flexible), wanted - sum(fitted[i] for i in
                                                                          flexible)
    for i in flexible:  # what is left beyond the floors, in proportion to what each lacks
        fitted[i] += max(0, left) * (widths[i] - fitted[i]) // beyond
    return fitted
