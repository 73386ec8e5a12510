"""The fixed held-out split of sentence pairs, and the translation data builder's cleaning."""

from __future__ import annotations

import json
from pathlib import Path

from attndeploy.models.seq2seq.pairs import near_duplicate_key, split_pairs
from tests.benchmark_scripts import load_benchmark


def _builder():
    return load_benchmark("translation_data")


def _letters(i: int) -> str:
    """A distinct letters-only word for each i (digits would make near-duplicates)."""
    return chr(97 + i % 26) + chr(97 + i // 26)


def test_near_duplicates_share_a_key():
    assert near_duplicate_key("Open 2 files…") == near_duplicate_key("open 3 FILES")
    assert near_duplicate_key("Open file") != near_duplicate_key("Close file")


def test_split_is_fixed_and_keeps_near_duplicates_on_one_side():
    pairs = [(f"Satz Nummer {i} hier", f"sentence {i}") for i in range(400)]  # one key: a group
    pairs += [(f"Wort {_letters(i)} ist da", f"word {_letters(i)}") for i in range(400)]
    train, held = split_pairs(pairs, 0.2)
    numbered = {p for p in pairs[:400]}
    assert numbered <= set(train) or numbered <= set(held)  # the whole group on one side
    assert 0 < len(held) < len(pairs) and len(train) + len(held) == len(pairs)
    assert split_pairs(list(reversed(pairs)), 0.2)[1] == list(reversed(held))  # order-free


def test_shared_target_joins_different_sources():
    pairs = [("Datei öffnen", "Open file"), ("Öffne die Datei", "open file")]
    pairs += [(f"anderer Text {_letters(i)}", f"other {_letters(i)}") for i in range(200)]
    for fraction in (0.1, 0.5, 0.9):
        train, held = split_pairs(pairs, fraction)
        assert (pairs[0] in held) == (pairs[1] in held)


def test_builder_cleans_both_sources(tmp_path: Path):
    builder = _builder()
    ding = tmp_path / "de-en"
    ding.write_text(
        "# comment\n"
        "Haus {n} | Das Haus ist sehr groß und alt. :: house | The house is big and old.\n"
        "etw. tun | Er hat etw. für uns getan. :: to do sth. | He did sth. for us.\n"
        "Kurz. :: Short.\n", encoding="utf-8")
    assert builder.ding_pairs(ding) == [("Das Haus ist sehr groß und alt.",
                                         "The house is big and old.")]
    assert builder._clean_message("_Open the file") == "Open the file"
    for bad in ("%s files", "<b>bold</b> text", "two\nlines", "{0} items", "Open"):
        assert builder._clean_message(bad) is None


def test_builder_writes_jsonl_and_summary(tmp_path: Path, capsys):
    builder = _builder()
    ding = tmp_path / "de-en"
    ding.write_text("".join(f"Das ist der Satz Nummer {w}. :: This is sentence {w}.\n"
                            for w in ("eins", "zwei", "drei", "vier")), encoding="utf-8")
    out = tmp_path / "pairs.jsonl"
    assert builder.main(["--ding", str(ding), "--locale-dir", str(tmp_path / "none"),
                         "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["pairs"] == len(lines) == 4  # "eins".."vier" differ: no duplicates
    assert summary["train_pairs"] + summary["held_out_pairs"] == 4
    assert set(lines[0]) == {"source", "target"}
