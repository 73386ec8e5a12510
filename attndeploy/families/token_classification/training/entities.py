"""Entity-level scores and the gazetteer baseline of token-classification.

Entities are exact spans (type, start, end) as seqeval and the Bakeoff scorer count them
(`runtime.entity_spans`): a predicted entity is right only when its type and both ends are.
Precision = right / predicted, recall = right / gold, F1 their harmonic mean, summed over a
whole set (micro), never averaged per sentence.

The gazetteer (`gazetteer_scores`) is the baseline every learnt tagger must beat: the entities of
the training sentences (their token sequences, each with its most frequent type), matched in a
held-out sentence left to right, longest first. It knows no context, so it finds every mention
of a known name and none of a new one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from attndeploy.families.token_classification.runtime import entity_spans

Span = tuple[str, int, int]  # (type, start, end exclusive)


def span_counts(predicted: Iterable[Sequence[str]], gold: Iterable[Sequence[str]]
                ) -> dict[str, int]:
    """{"entities_right", "entities_predicted", "entities_gold"} over pairs of tag sequences."""
    right = found = wanted = 0
    for guess, truth in zip(predicted, gold, strict=True):
        guessed, true = set(entity_spans(guess)), set(entity_spans(truth))
        right += len(guessed & true)
        found += len(guessed)
        wanted += len(true)
    return {"entities_right": right, "entities_predicted": found, "entities_gold": wanted}


def entity_scores(counts: dict[str, float], prefix: str = "") -> dict[str, float]:
    """precision, recall, f1 (each `prefix`ed) from summed `span_counts`; 0 where undefined."""
    right = counts.get("entities_right", 0)
    precision = right / counts["entities_predicted"] if counts.get("entities_predicted") else 0.0
    recall = right / counts["entities_gold"] if counts.get("entities_gold") else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {f"{prefix}precision": precision, f"{prefix}recall": recall, f"{prefix}f1": f1}


def build_gazetteer(docs: Iterable[Sequence[str]], tags: Iterable[Sequence[str]]
                    ) -> dict[tuple[str, ...], str]:
    """{entity tokens: its most frequent type} over the training sentences."""
    seen: dict[tuple[str, ...], Counter[str]] = {}
    for doc, row in zip(docs, tags, strict=True):
        for kind, start, end in entity_spans(row):
            seen.setdefault(tuple(doc[start:end]), Counter())[kind] += 1
    return {words: counts.most_common(1)[0][0] for words, counts in seen.items()}


def gazetteer_spans(doc: Sequence[str], gazetteer: dict[tuple[str, ...], str],
                    longest: int) -> list[Span]:
    """The known entities of one sentence, left to right, the longest match first at each
    position; a match is skipped past."""
    spans, start = [], 0
    while start < len(doc):
        for end in range(min(len(doc), start + longest), start, -1):
            kind = gazetteer.get(tuple(doc[start:end]))
            if kind is not None:
                spans.append((kind, start, end))
                start = end
                break
        else:
            start += 1
    return spans


def gazetteer_scores(fit_docs: Sequence[Sequence[str]], fit_tags: Sequence[Sequence[str]],
                     eval_docs: Sequence[Sequence[str]], eval_tags: Sequence[Sequence[str]]
                     ) -> dict[str, float]:
    """The gazetteer of `fit_*` scored on `eval_*`: baseline_precision, _recall, _f1 and
    baseline_entries (its size)."""
    gazetteer = build_gazetteer(fit_docs, fit_tags)
    longest = max((len(words) for words in gazetteer), default=0)
    right = found = wanted = 0
    for doc, row in zip(eval_docs, eval_tags, strict=True):
        guessed = set(gazetteer_spans(doc, gazetteer, longest))
        true = set(entity_spans(row))
        right += len(guessed & true)
        found += len(guessed)
        wanted += len(true)
    counts = {"entities_right": right, "entities_predicted": found, "entities_gold": wanted}
    return {**entity_scores(counts, "baseline_"), "baseline_entries": len(gazetteer)}
