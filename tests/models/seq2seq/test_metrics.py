"""BLEU and chrF as sacreBLEU 2.6.0 computes them (the expected values were printed by
`sacrebleu.corpus_bleu` / `corpus_chrf` on these very strings), and the two baselines."""

from __future__ import annotations

import pytest

from attndeploy.models.seq2seq.metrics import (
    RetrievalBaseline,
    copy_baseline,
    corpus_bleu,
    corpus_chrf,
    tokenize_13a,
)

SACREBLEU = [  # hypothesis, reference, BLEU, chrF (sacrebleu 2.6.0)
    ("", "", 0.0, 0.0),
    ("a b", "a b c d e f", 0.0, 31.25),
    ("the cat sat on the mat.", "the cat is on the mat.", 48.892302243490086, 67.17273492330233),
    ("Zahl 3,5-fach & <x>", "3.5 mal &amp; x", 6.567274736060395, 9.114583333333332),
]


@pytest.mark.parametrize("hypothesis, reference, bleu, chrf", SACREBLEU)
def test_scores_match_sacrebleu(hypothesis, reference, bleu, chrf):
    assert corpus_bleu([hypothesis], [reference]) == pytest.approx(bleu, abs=1e-9)
    assert corpus_chrf([hypothesis], [reference]) == pytest.approx(chrf, abs=1e-9)


def test_corpus_statistics_are_summed_not_averaged():
    hyps = [h for h, *_ in SACREBLEU]
    refs = [r for _, r, *_ in SACREBLEU]
    assert corpus_bleu(hyps, refs) != pytest.approx(sum(b for *_, b, _ in SACREBLEU) / 4)
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert corpus_chrf(refs[1:], refs[1:]) == pytest.approx(100.0)


def test_13a_splits_punctuation_but_not_numbers():
    assert tokenize_13a("Hello, world 3.5-fold!") == ["Hello", ",", "world", "3.5", "-",
                                                      "fold", "!"]


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError):
        corpus_bleu(["a"], [])


def test_retrieval_returns_the_nearest_training_target():
    baseline = RetrievalBaseline([("Datei öffnen", "Open file"),
                                  ("Datei schließen", "Close file"),
                                  ("Fenster schließen", "Close window")])
    assert baseline.translate("die Datei schließen") == "Close file"
    assert baseline.translate("Fenster") == "Close window"
    assert baseline.translate("unbekannt") in {"Open file", "Close file", "Close window"}
    assert copy_baseline(["x y"]) == ["x y"]
