"""`attndeploy predict --file` streams: a chunk of lines is read, run and printed before the next
is read; indices and error line numbers count across chunks; a Ctrl-C keeps the printed chunks;
the progress bar goes to a terminal's stderr when stdout is redirected; a reader that leaves
(`| head -1`) ends the command quietly with exit 0."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attndeploy.cli import predict as predict_cli
from attndeploy.runtime import InferenceModel

from .conftest import MAX_SEQ, TEXTS, TextExports
from .records import assert_same_record
from .test_predict_cli import json_lines, run_main


@pytest.fixture(scope="module")
def ganet(text_exports: TextExports) -> Path:
    return text_exports.get("ganet_mlp").path


def texts(n: int) -> list[str]:
    return [TEXTS[i % len(TEXTS)] for i in range(n)]


class RecordingStdin:
    """Stands in for sys.stdin (and its binary `buffer`): `readline` hands out `lines` as
    bytes, noting, as each line is read, how many lines were read and how many JSON records
    stdout held at that moment."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = iter(lines)
        self.reads: list[tuple[int, int]] = []  # (lines read, with this one; records printed)

    @property
    def buffer(self) -> RecordingStdin:
        return self

    def readline(self, limit: int = -1) -> bytes:
        line = next(self.lines, None)
        if line is None:
            return b""
        printed = sys.stdout.getvalue().count("\n")  # pytest's capture of stdout
        self.reads.append((len(self.reads) + 1, printed))
        return (line + "\n").encode()


def test_a_chunk_is_printed_before_the_next_chunk_is_read(ganet, monkeypatch, capsys):
    monkeypatch.setattr(predict_cli, "CHUNK_TEXTS", 4)
    stdin = RecordingStdin(texts(11))
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", "-",
                              "--jsonl")
    assert code == 0, err
    assert [r["index"] for r in json_lines(out)] == list(range(11))
    printed_when_read = dict(stdin.reads)
    # lines 1-4 are read before anything is printed; line 5 only once 1-4 are out, and so on
    assert [printed_when_read[n] for n in (1, 4, 5, 8, 9, 11)] == [0, 0, 4, 4, 8, 8]


def test_the_input_read_ahead_of_the_output_is_one_chunk_at_most(ganet, monkeypatch, capsys):
    """Memory stays flat: never more than a chunk of texts is held between reading and
    printing, however long the input (here 3,000 lines in chunks of 256)."""
    monkeypatch.setattr(predict_cli, "CHUNK_TEXTS", 256)
    stdin = RecordingStdin(texts(3000))
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", "-",
                              "--jsonl", "--batch-size", "64")
    assert code == 0, err
    records = json_lines(out)
    assert [r["index"] for r in records] == list(range(3000))
    assert max(read - printed for read, printed in stdin.reads) <= 256
    sample = [0, 255, 256, 1999, 2999]
    expected = InferenceModel(ganet).predict([texts(3000)[i] for i in sample])
    for i, prediction in zip(sample, expected, strict=True):
        assert records[i]["label"] == prediction.label
        assert records[i]["attended"] == prediction.attended


def test_chunked_output_equals_one_run_as_json_and_as_one_table(ganet, tmp_path, monkeypatch,
                                                                capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(texts(23)) + "\n")
    code, whole, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file",
                                str(lines), "--jsonl")
    assert code == 0, err
    monkeypatch.setattr(predict_cli, "CHUNK_TEXTS", 5)
    code, chunked, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file",
                                  str(lines), "--jsonl")
    assert code == 0, err
    assert [r["index"] for r in json_lines(chunked)] == list(range(23))
    for got, want in zip(json_lines(chunked), json_lines(whole), strict=True):
        assert_same_record(got, want, atol=1e-5)  # other batches: logits equal to float noise
    monkeypatch.setattr(predict_cli.console, "width", 300)  # a row a line: nothing wraps
    code, table, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file",
                                str(lines))
    assert code == 0, err
    rows = table.splitlines()
    assert sum("label" in row for row in rows) == 1  # one header for the five chunks' tables
    assert [row.split()[0] for row in rows[2:]] == [str(i) for i in range(23)]
    assert len({row.index("│") for row in rows[2:]}) == 1  # the chunks' columns line up


@pytest.mark.parametrize(
    ("bad_line", "fragment"),
    [("w1 " * (MAX_SEQ + 1), "line 11 of {file} has {n} tokens, more than the model's "
                             "max_seq={max_seq}; shorten it or pass --truncate"),
     ("", "line 11 of {file} has no tokens")],
    ids=["too-long", "blank"],
)
def test_an_error_in_a_later_chunk_names_its_line_and_keeps_what_was_printed(
    ganet, tmp_path, monkeypatch, capsys, bad_line, fragment
):
    monkeypatch.setattr(predict_cli, "CHUNK_TEXTS", 4)
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join([*texts(10), bad_line, *texts(3)]) + "\n")
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", str(lines),
                              "--jsonl")
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error (data): " + fragment.format(file=lines, n=MAX_SEQ + 1,
                                                                 max_seq=MAX_SEQ))
    assert [r["index"] for r in json_lines(out)] == list(range(8))  # chunks 1 and 2


def test_a_bad_byte_in_a_later_line_names_its_offset_and_line(ganet, tmp_path, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(predict_cli, "CHUNK_TEXTS", 2)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"\xef\xbb\xbfw1\nw2\nw3\nw4 \xff\n")  # a BOM, then a bad byte on line 4
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", str(lines),
                              "--jsonl")
    assert code == 1 and len(json_lines(out)) == 2
    assert err == [f"error (data): {lines} is not UTF-8 text (bad byte at offset 15, line 4)"]


def test_an_endless_line_is_refused_without_being_read_whole(ganet, monkeypatch, capsys):
    from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES

    class EndlessStdin:  # one line, then a line that never ends: each read gets what it asks
        buffer = property(lambda self: self)

        def __init__(self) -> None:
            self.limits: list[int] = []

        def readline(self, limit: int = -1) -> bytes:
            self.limits.append(limit)
            return b"w1 alpha\n" if len(self.limits) == 1 else b"w" * limit

    stdin = EndlessStdin()
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", "-")
    assert code == 1 and out == ""
    assert err == [f"error (data): line 2 of stdin has more than {DEFAULT_MAX_TEXT_BYTES} "
                   "bytes, the limit per text"]
    assert all(0 < limit < DEFAULT_MAX_TEXT_BYTES + 16 for limit in stdin.limits)


def test_ctrl_c_keeps_the_chunks_already_printed(ganet, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(predict_cli, "CHUNK_TEXTS", 3)
    original, calls = InferenceModel.predict, []

    def interrupted_third_chunk(self, chunk, **kwargs):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, chunk, **kwargs)

    monkeypatch.setattr(InferenceModel, "predict", interrupted_third_chunk)
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(texts(20)))
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", str(lines),
                              "--jsonl")
    assert (code, err) == (130, ["error (attndeploy): interrupted"])
    assert [r["index"] for r in json_lines(out)] == list(range(6))


# --------------------------------------------------------------------------- real processes

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def predict_process(ganet: Path, *args: str, **kwargs) -> subprocess.Popen:
    kwargs.setdefault("env", ENV)
    return subprocess.Popen([sys.executable, "-m", "attndeploy", "predict", str(ganet), *args],
                            **kwargs)


def test_stdin_results_come_out_while_the_input_is_still_open(ganet):
    """A pipe: the first chunk's results arrive before the writer has finished (or closed)."""
    process = predict_process(ganet, "--text-file", "-", "--jsonl", stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = texts(predict_cli.CHUNK_TEXTS)
        process.stdin.write(("\n".join(first) + "\n").encode())
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], 120)
        assert ready, "no output within 120 s of a full chunk"
        record = json.loads(process.stdout.readline())
        assert record["index"] == 0 and process.poll() is None  # still waiting for more
        process.stdin.write(b"w1 alpha\n")
        process.stdin.close()
        rest = process.stdout.read().decode().splitlines()
        assert process.wait(timeout=120) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert json.loads(rest[-1])["index"] == len(first) == len(rest)


@pytest.mark.parametrize("args", [["--jsonl"], []], ids=["json", "table"])
def test_a_reader_that_leaves_early_ends_predict_with_exit_0_and_no_message(
    ganet, tmp_path, args
):
    """`attndeploy predict ... | head -1`: the first line is read, the pipe closed; the command
    stops at its next write, exit 0, nothing on stderr (no 'Exception ignored')."""
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(texts(3 * predict_cli.CHUNK_TEXTS)) + "\n")
    process = predict_process(ganet, "--text-file", str(lines), *args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (code, stderr) == (0, "")


def test_the_progress_bar_goes_to_a_terminal_stderr_when_stdout_is_redirected(ganet, tmp_path):
    lines = tmp_path / "lines.txt"
    n = predict_cli.PROGRESS_MIN_TEXTS + 1
    lines.write_text("\n".join(texts(n)) + "\n")
    master, slave = pty.openpty()
    out = tmp_path / "out.jsonl"
    with out.open("wb") as stdout:
        process = predict_process(ganet, "--text-file", str(lines), "--jsonl", "--batch-size", "8",
                                  stdout=stdout, stderr=slave, stdin=subprocess.DEVNULL,
                                  env={**ENV, "TERM": "xterm", "COLUMNS": "120"})
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert process.wait(timeout=60) == 0, seen[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert b"predict" in seen and f"{n} texts".encode() in seen and b"% of" in seen
    assert [r["index"] for r in json_lines(out.read_text())] == list(range(n))  # no bar in it
