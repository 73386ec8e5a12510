"""`attndeploy predict MODEL.onnx`, in process: --text, --file, stdin, JSON lines, the table,
the progress bar for long files, and one-line errors naming the bad line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from attndeploy.cli import app as cli_app
from attndeploy.cli import predict as predict_cli
from attndeploy.runtime import InferenceModel

from .conftest import MAX_SEQ, TEXTS, TextExports
from .records import assert_same_record


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str):
    monkeypatch.setattr("sys.argv", ["attndeploy", *args])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def ganet(text_exports: TextExports) -> Path:
    return text_exports.get("ganet_mlp").path


def test_json_lines_hold_one_object_per_text_equal_to_the_library(ganet, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text", TEXTS[0],
                              "--text", "Amber, W3!", "--jsonl")
    assert code == 0, err
    records = json_lines(out)
    expected = InferenceModel(ganet).predict([TEXTS[0], "Amber, W3!"])
    assert [r["index"] for r in records] == [0, 1]
    for record, prediction in zip(records, expected, strict=True):
        assert set(record) == {"index", "contract_version", "tokens", "label", "logits",
                               "probabilities", "attended"}
        assert record["label"] == prediction.label
        assert record["attended"] == prediction.attended
        assert_same_record(record, prediction.to_dict(), atol=1e-6)


def test_json_is_one_document_holding_the_records_of_jsonl(ganet, tmp_path, monkeypatch,
                                                           capsys):
    """--json means one JSON document in every command; --jsonl is the JSON lines form."""
    texts = ["--text", TEXTS[0], "--text", "Amber, W3!"]
    code, lines, err = run_main(monkeypatch, capsys, "predict", str(ganet), *texts, "--jsonl")
    assert code == 0, err
    code, document, err = run_main(monkeypatch, capsys, "predict", str(ganet), *texts, "--json")
    assert code == 0 and err == [], err
    assert json.loads(document) == {"model": str(ganet), "predictions": json_lines(lines)}
    empty = tmp_path / "blank.txt"
    empty.write_text("w1\n")
    code, document, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file",
                                   str(empty), "--json")
    assert code == 0 and len(json.loads(document)["predictions"]) == 1
    assert err == []  # the change of --json was announced for one release; no warning now
    code, _, err = run_main(monkeypatch, capsys, "predict", str(ganet), *texts, "--json",
                            "--jsonl")
    assert code == 1 and "not both" in err[0]


def test_a_pipe_is_a_text_file(ganet, tmp_path, monkeypatch, capsys):
    """`--text-file <(...)`: the shell hands a /dev/fd path to a pipe, read like a file."""
    import os
    import threading

    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write("\n".join(TEXTS[:3]).encode())

    threading.Thread(target=feed).start()
    try:
        code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file",
                                  f"/dev/fd/{read_end}", "--jsonl")
    finally:
        os.close(read_end)
    assert code == 0, err
    assert [r["tokens"] for r in json_lines(out)] == [t.lower().split() for t in TEXTS[:3]]


def test_a_file_and_stdin_give_the_same_records(ganet, tmp_path, monkeypatch, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_bytes("\r\n".join(TEXTS[:6]).encode() + b"\r\n")  # CRLF, a final line end
    code, from_file, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file",
                                    str(lines), "--jsonl")
    assert code == 0, err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines.read_bytes())))
    code, from_stdin, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", "-",
                                     "--jsonl")
    assert code == 0, err
    assert json_lines(from_file) == json_lines(from_stdin)
    assert [r["tokens"] for r in json_lines(from_file)] == [
        t.lower().split() for t in TEXTS[:6]]


def test_the_table_shows_label_probability_attended_and_text(ganet, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text", "w1 alpha")
    assert code == 0, err
    (prediction,) = InferenceModel(ganet).predict(["w1 alpha"])
    header, row = out.splitlines()[0], out.splitlines()[2]
    assert all(word in header for word in ("label", "probability", "attended", "text"))
    assert prediction.label in row and f"{prediction.probabilities.max():.4f}" in row


@pytest.mark.parametrize("width", [80, 50, 40])
def test_a_narrow_console_shortens_the_text_and_tokens_never_the_label(ganet, monkeypatch,
                                                                        capsys, width: int):
    text = " ".join(["w1 alpha w2 w3 amber"] * 4)  # 80 cells, 20 tokens, several gates open
    monkeypatch.setattr(predict_cli.console, "width", width)
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text", text)
    assert code == 0, err
    (prediction,) = InferenceModel(ganet).predict([text])
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), lines
    assert lines[0].split("┃")[:3] == ["# ", " label ", " probability "]
    index, label, probability = (cell.strip() for cell in lines[2].split("│")[:3])
    assert (index, label) == ("0", prediction.label)
    assert probability == f"{prediction.probabilities.max():.4f}"
    assert "…" in lines[2].split("│")[-1]  # the text ends in an ellipsis


def test_a_tagging_model_prints_token_tag_pairs(text_exports, monkeypatch, capsys):
    path = text_exports.get("ganet_tagging").path
    code, out, err = run_main(monkeypatch, capsys, "predict", str(path), "--text", "w1 w2 w1")
    assert code == 0, err
    (prediction,) = InferenceModel(path).predict(["w1 w2 w1"])
    assert " ".join(f"{t}/{g}" for t, g in zip(prediction.tokens, prediction.tags,
                                               strict=True)) in out
    code, out, err = run_main(monkeypatch, capsys, "predict", str(path), "--text", "w1 w2",
                              "--jsonl")
    (record,) = json_lines(out)
    assert set(record) == {"index", "contract_version", "tokens", "tags", "logits",
                           "probabilities", "attended"}
    assert len(record["tags"]) == len(record["logits"]) == len(record["probabilities"]) == 2


def test_a_long_file_runs_with_a_progress_callback(ganet, tmp_path, monkeypatch, capsys):
    calls: list[int] = []
    original = InferenceModel.predict

    def spy(self, texts, **kwargs):
        def progress(done: int) -> None:
            calls.append(done)
            kwargs["progress"](done)

        return original(self, texts, **{**kwargs, "progress": progress})

    monkeypatch.setattr(InferenceModel, "predict", spy)
    n = predict_cli.PROGRESS_MIN_TEXTS + 1
    lines = tmp_path / "many.txt"
    lines.write_text("\n".join(TEXTS[i % len(TEXTS)] for i in range(n)))
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", str(lines),
                              "--jsonl", "--batch-size", "64")
    assert code == 0 and err == []  # stderr is no terminal here: no bar, not even a newline
    assert len(json_lines(out)) == n
    assert sum(calls) == n and len(calls) == -(-n // 64)


def test_truncate_lets_a_long_line_through(ganet, tmp_path, monkeypatch, capsys):
    long_line = " ".join(f"w{i}" for i in range(MAX_SEQ + 3))
    lines = tmp_path / "long.txt"
    lines.write_text(f"w1 alpha\n{long_line}\n")
    code, _, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", str(lines))
    assert code == 1 and len(err) == 1
    assert err[0] == (f"error (data): line 2 of {lines} has {MAX_SEQ + 3} tokens, more than "
                      f"the model's max_seq={MAX_SEQ}; shorten it or pass --truncate")
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), "--text-file", str(lines),
                              "--truncate", "--jsonl")
    assert code == 0, err
    assert len(json_lines(out)[1]["tokens"]) == MAX_SEQ


BAD = {
    "no texts": ([], "error (data): give texts with --text"),
    "both sources": (["--text", "a", "--text-file", "x.txt"], "not both"),
    "blank line": (["--text-file", "{blank}"], "line 2 of {blank} has no tokens"),
    "empty text": (["--text", "w1", "--text", "  "], "--text #2 has no tokens"),
    "empty file": (["--text-file", "{empty}"], "{empty} holds no text"),
    "missing file": (["--text-file", "{tmp}/absent.txt"], "no such file: {tmp}/absent.txt"),
    "folder as file": (["--text-file", "{tmp}"], "is a folder; --text-file takes a text file"),
    "not utf-8": (["--text-file", "{latin}"], "is not UTF-8 text"),
}
# A value outside a shared option's one range (`cli/options.RANGES`) is a usage error, exit 2.
BAD_USAGE = {
    "bad batch size": (["--text", "w1", "--batch-size", "0"], "'--batch-size'"),
    "zero threads": (["--text", "w1", "--threads", "0"], "'--threads'"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line_and_exit_1(name, ganet, tmp_path, monkeypatch, capsys):
    (tmp_path / "blank.txt").write_text("w1 alpha\n\nw2\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    values = {"tmp": str(tmp_path), "blank": str(tmp_path / "blank.txt"),
              "empty": str(tmp_path / "empty.txt"), "latin": str(tmp_path / "latin.txt")}
    argv, fragment = BAD[name]
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet),
                              *(arg.format(**values) for arg in argv))
    assert code == 1 and out == ""
    assert len(err) == 1 and fragment.format(**values) in err[0], err


@pytest.mark.parametrize("name", sorted(BAD_USAGE))
def test_a_value_out_of_its_range_is_a_usage_error_exit_2(name, ganet, monkeypatch, capsys):
    argv, fragment = BAD_USAGE[name]
    code, out, err = run_main(monkeypatch, capsys, "predict", str(ganet), *argv)
    assert code == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("error (usage)") and fragment in err[0], err


def test_a_model_that_is_not_an_attndeploy_export_is_one_line(tmp_path, monkeypatch, capsys):
    from tests.runtime.test_model import _foreign

    foreign = _foreign(tmp_path / "foreign.onnx")
    code, _, err = run_main(monkeypatch, capsys, "predict", str(foreign), "--text", "a")
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error (model): ") and "not exported by attndeploy" in err[0]
