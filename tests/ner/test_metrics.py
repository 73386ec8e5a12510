"""Entity-level scores (exact spans, as seqeval counts them) and the gazetteer baseline."""

from __future__ import annotations

import pytest

from attndeploy.families.token_classification.runtime import entity_spans
from attndeploy.families.token_classification.training.entities import (
    entity_scores,
    gazetteer_scores,
    gazetteer_spans,
    span_counts,
)


@pytest.mark.parametrize(("tags", "spans"), [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
    (["B-LOC", "M-LOC", "E-LOC", "S-PER", "O"], [("LOC", 0, 3), ("PER", 3, 4)]),
    (["O", "I-PER", "I-PER", "B-PER"], [("PER", 1, 3), ("PER", 3, 4)]),  # conlleval's reading
    (["B-PER", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),
    (["NN", "NN", "O"], [("NN", 0, 1), ("NN", 1, 2)]),  # plain tags: one token each
])
def test_entities_are_read_as_conlleval_chunks(tags, spans) -> None:
    assert entity_spans(tags) == spans


def test_a_span_counts_only_with_its_type_and_both_ends_right() -> None:
    gold = [["B-PER", "E-PER", "O", "S-LOC"]]
    predicted = [["B-PER", "E-PER", "O", "S-ORG"]]  # PER right, LOC typed wrong
    scores = entity_scores(span_counts(predicted, gold))
    assert scores == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    short = entity_scores(span_counts([["S-PER", "O", "O", "S-LOC"]], gold))
    assert short["precision"] == short["recall"] == 0.5


def test_the_gazetteer_matches_known_entities_longest_first() -> None:
    gazetteer = {("new",): "LOC", ("new", "york"): "LOC", ("york", "times"): "ORG"}
    spans = gazetteer_spans(["the", "new", "york", "times"], gazetteer, longest=2)
    assert spans == [("LOC", 1, 3)]  # "new york" first, then "times" alone is unknown


def test_the_gazetteer_baseline_finds_seen_names_and_misses_new_ones() -> None:
    fit = [["john", "lives", "in", "paris"]]
    fit_tags = [["S-PER", "O", "O", "S-LOC"]]
    docs = [["paris", "is", "far"], ["mary", "met", "john"]]
    tags = [["S-LOC", "O", "O"], ["S-PER", "O", "S-PER"]]
    scores = gazetteer_scores(fit, fit_tags, docs, tags)
    assert scores["baseline_precision"] == 1.0
    assert scores["baseline_recall"] == pytest.approx(2 / 3)
    assert scores["baseline_entries"] == 2
