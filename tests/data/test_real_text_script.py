"""benchmarks/real_text.py (what `make real-text` runs after unpacking the fortunes packages) on
fake package files: both sets built, labelled, de-duplicated and capped, with the manifest;
without the fortunes categories that set is left out with a line, the Debian one still built."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture
def script():
    return load_benchmark("real_text")


def _packages(path: Path) -> Path:
    stanzas = []
    for section in ("admin", "games", "utils"):
        for i in range(3):
            stanzas.append(f"Package: {section}-tool{i}\nSection: {section}\n"
                           f"Description: a small {section} program number {i}\n extra line")
    stanzas.append("Package: games-tool0-data\nSource: games-tool0\nSection: games\n"
                   "Description: the data of the small games program number zero")
    path.write_text("\n\n".join(stanzas) + "\n")
    return path


def _fortunes(folder: Path, categories) -> Path:
    folder.mkdir()
    for name in categories:
        entries = [f"a {name} fortune number {i} said by someone" for i in range(4)]
        entries.append(entries[0])  # a duplicate, kept once
        (folder / name).write_text("\n%\n".join(entries) + "\n")
    return folder


def _run(script, monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["real_text.py", *argv])
    script.main()


def test_both_sets_are_built_labelled_deduplicated_and_capped(script, tmp_path, monkeypatch):
    fortunes = _fortunes(tmp_path / "fortunes", script.FORTUNE_CATEGORIES)
    out = tmp_path / "out"
    _run(script, monkeypatch, "--out", str(out), "--cap", "3", "--fortunes-dir", str(fortunes),
         "--packages-file", str(_packages(tmp_path / "Packages")))
    rows = [json.loads(line) for line in (out / "fortunes.jsonl").read_text().splitlines()]
    assert {row["label"] for row in rows} == set(script.FORTUNE_CATEGORIES)
    assert all(sum(r["label"] == label for r in rows) == 3 for label in script.FORTUNE_CATEGORIES)
    assert len({row["text"] for row in rows}) == len(rows)
    debian = [json.loads(line) for line in (out / "debian.jsonl").read_text().splitlines()]
    assert {row["label"] for row in debian} == {"admin", "games"}  # utils is a catch-all
    assert len(debian) == 6  # games-tool0-data speaks for no second source
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["sets"]) == {"fortunes", "debian"}
    assert manifest["sets"]["debian"]["labels"] == {"admin": 3, "games": 3}


def test_without_the_fortunes_categories_only_debian_is_built(script, tmp_path, monkeypatch,
                                                              capsys):
    partial = _fortunes(tmp_path / "fortunes", script.FORTUNE_CATEGORIES[:2])
    out = tmp_path / "out"
    _run(script, monkeypatch, "--out", str(out), "--fortunes-dir", str(partial),
         "--packages-file", str(_packages(tmp_path / "Packages")))
    assert "fortunes: left out" in capsys.readouterr().out
    assert (out / "debian.jsonl").is_file() and not (out / "fortunes.jsonl").exists()
    with pytest.raises(SystemExit, match="nothing to build"):
        _run(script, monkeypatch, "--out", str(tmp_path / "none"), "--sets", "fortunes",
             "--fortunes-dir", str(partial))
    assert not (tmp_path / "none").exists()
