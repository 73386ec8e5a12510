"""`loadtest --text-file <(...)`: a pipe is a text file like any other (read once)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from attndeploy.errors import LoadTestError
from attndeploy.serving.loadtest import LoadTestConfig
from attndeploy.serving.loadtest.inputs import read_text_file


def test_a_pipe_is_accepted_and_read_as_a_text_file(tmp_path: Path) -> None:
    fifo = tmp_path / "texts"
    os.mkfifo(fifo)
    LoadTestConfig(model="m", text_file=fifo)  # validation does not open it

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as out:
            out.write("w1 alpha\n\n  \nw2 bravo\n")

    writer = threading.Thread(target=write)
    writer.start()
    assert read_text_file(fifo) == ["w1 alpha", "w2 bravo"]
    writer.join(timeout=10)


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: tmp / "missing.txt", "does not exist"),
    (lambda tmp: tmp, "is a folder"),
])
def test_a_missing_text_file_or_a_folder_is_refused(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(LoadTestError, match=f"text_file .* {message}"):
        LoadTestConfig(model="m", text_file=make(tmp_path))
