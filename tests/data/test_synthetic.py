"""Synthetic tasks (determinism, padding, labels recomputed independently) and TextDataset."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from attndeploy.data import TASKS, TextDataset, example_texts, get_task, register_task, task_names
from attndeploy.errors import DataError

# The sparse_evidence rule, restated here rather than imported: marker word -> class name.
MARKER_CLASS = {
    "alpha": "alpha", "amber": "alpha",
    "bravo": "bravo", "bronze": "bravo",
    "charlie": "charlie", "cobalt": "charlie",
    "delta": "delta", "denim": "delta",
}
N = 300


@pytest.fixture(scope="module", params=sorted(TASKS))
def generated(request):
    task = get_task(request.param)
    dataset, tokenizer = task.generate(N, seed=3)
    return task, dataset, tokenizer


def real_words(dataset, tokenizer, row):
    length = int(dataset.attention_mask[row].sum())
    return tokenizer.decode(dataset.input_ids[row, :length].tolist())


def test_task_names_lists_the_builtin_tasks():
    assert task_names()[0] == "sparse_evidence"
    assert set(task_names()) == {"sparse_evidence", "tagging"}


def test_unknown_task_lists_the_valid_names():
    with pytest.raises(DataError, match="unknown task 'nope'; valid: sparse_evidence, tagging"):
        get_task("nope")


def test_registering_a_task_twice_fails():
    with pytest.raises(DataError, match="registered twice"):
        register_task(
            "tagging", head="tagging", description="", default_max_seq=8,
            label_names=("a", "b"), words=("x",), min_len=1,
        )(lambda rng, n, max_len: [])


def test_same_seed_gives_identical_tensors(generated):
    task, dataset, tokenizer = generated
    again, tokenizer_again = task.generate(N, seed=3)
    assert tokenizer_again == tokenizer
    for name in ("input_ids", "attention_mask", "labels"):
        assert torch.equal(getattr(again, name), getattr(dataset, name))
    other, _ = task.generate(N, seed=4)
    assert not torch.equal(other.input_ids[:, :8], dataset.input_ids[:, :8])


def test_shapes_dtypes_and_right_padding(generated):
    task, dataset, tokenizer = generated
    ids, mask = dataset.input_ids, dataset.attention_mask
    assert ids.dtype == mask.dtype == dataset.labels.dtype == torch.long
    assert ids.shape[0] == len(dataset) == N and ids.shape[1] <= task.default_max_seq
    lengths = mask.sum(dim=1)
    assert (lengths >= task.min_len).all()  # so every example has at least one real token
    expected = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()  # 1…1 0…0
    assert torch.equal(mask, expected)
    assert (ids[mask == 0] == 0).all() and (ids[mask == 1] > 1).all()  # no pad, no <unk>
    assert dataset.head == task.head and dataset.label_names == task.label_names
    assert len(tokenizer) == 2 + len(task.words)


def test_example_texts_encode_to_the_generated_ids(generated):
    task, dataset, tokenizer = generated
    texts = example_texts(task.name, N, 3)
    ids, mask = tokenizer.encode_batch(texts, max_seq=task.default_max_seq)
    assert torch.equal(ids, dataset.input_ids) and torch.equal(mask, dataset.attention_mask)


def test_max_seq_caps_the_lengths(generated):
    task, _, _ = generated
    short, _ = task.generate(50, seed=0, max_seq=task.min_len + 2)
    assert short.input_ids.shape[1] <= task.min_len + 2
    with pytest.raises(DataError, match="too small"):
        task.generate(5, seed=0, max_seq=task.min_len - 1)


def test_sparse_evidence_labels_follow_the_marker_rule():
    dataset, tokenizer = get_task("sparse_evidence").generate(N, seed=11)
    densities = []
    for row in range(N):
        words = real_words(dataset, tokenizer, row)
        classes = {MARKER_CLASS[word] for word in words if word in MARKER_CLASS}
        assert len(classes) == 1, f"example {row} has marker classes {classes}"
        assert dataset.label_names[dataset.labels[row]] == classes.pop()
        densities.append(sum(word in MARKER_CLASS for word in words) / len(words))
    assert sum(densities) / N <= 0.15
    # All four classes occur, none dominates.
    counts = Counter(dataset.labels.tolist())
    assert set(counts) == {0, 1, 2, 3} and max(counts.values()) < 0.4 * N


def test_tagging_labels_mark_words_repeated_elsewhere():
    dataset, tokenizer = get_task("tagging").generate(N, seed=12)
    real = dataset.attention_mask.bool()
    assert (dataset.labels[~real] == -100).all()
    for row in range(N):
        words = real_words(dataset, tokenizer, row)
        expected = [int(words.count(word) >= 2) for word in words]
        assert dataset.labels[row, : len(words)].tolist() == expected
    repeated = dataset.labels[real].float().mean().item()
    assert 0.35 < repeated < 0.65  # balanced-ish


# ---------------------------------------------------------------- TextDataset


@pytest.fixture(scope="module")
def sparse():
    return get_task("sparse_evidence").generate(200, seed=5)[0]


def test_batches_are_trimmed_to_their_longest_real_sequence(generated):
    _, dataset, _ = generated
    seen, widths = 0, []
    generator = torch.Generator().manual_seed(0)
    for ids, mask, labels in dataset.batches(32, shuffle=True, generator=generator):
        assert ids.shape == mask.shape and ids.shape[1] == int(mask.sum(dim=1).max())
        widths.append(ids.shape[1])
        assert labels.shape[0] == ids.shape[0]
        if dataset.head == "tagging":
            assert labels.shape == ids.shape
        seen += ids.shape[0]
    assert seen == len(dataset)
    assert min(widths) < dataset.input_ids.shape[1]  # some batch was actually trimmed


def test_batches_without_shuffle_keep_the_order(sparse):
    labels = torch.cat([y for _, _, y in sparse.batches(64, shuffle=False)])
    assert torch.equal(labels, sparse.labels)


def test_batch_rows_name_the_examples_of_each_batch(generated):
    _, dataset, _ = generated
    kwargs = {"shuffle": True, "bucket": True}
    batches = list(dataset.batches(16, generator=torch.Generator().manual_seed(3), **kwargs))
    rows = list(dataset.batch_rows(16, generator=torch.Generator().manual_seed(3), **kwargs))
    assert torch.equal(torch.cat(rows).sort().values, torch.arange(len(dataset)))  # each once
    for (ids, mask, labels), index in zip(batches, rows, strict=True):
        again = dataset.batch_at(index)
        assert all(torch.equal(a, b) for a, b in zip((ids, mask, labels), again, strict=True))
        assert torch.equal(ids, dataset.input_ids[index, : ids.shape[1]])


def test_split_is_deterministic_disjoint_and_complete(sparse):
    train, held = sparse.split(0.25, seed=1)
    assert (len(train), len(held)) == (150, 50)
    again_train, again_held = sparse.split(0.25, seed=1)
    assert torch.equal(train.input_ids, again_train.input_ids)
    assert torch.equal(held.input_ids, again_held.input_ids)
    rows = {tuple(r.tolist()) for r in sparse.input_ids}
    train_rows = {tuple(r.tolist()) for r in train.input_ids}
    held_rows = {tuple(r.tolist()) for r in held.input_ids}
    assert not train_rows & held_rows and train_rows | held_rows == rows
    other_train, _ = sparse.split(0.25, seed=2)
    assert not torch.equal(other_train.input_ids, train.input_ids)


@pytest.mark.parametrize("fraction", [0.0, 1.0, 0.001])
def test_split_refuses_an_empty_part(sparse, fraction):
    with pytest.raises(DataError):
        sparse.split(fraction, seed=0)


def test_subset_takes_rows_in_order(sparse):
    part = sparse.subset(torch.tensor([3, 0]))
    assert torch.equal(part.labels, sparse.labels[[3, 0]])


def _rows(ids: list[list[int]], labels, head: str = "classification") -> TextDataset:
    ids = torch.tensor(ids)
    return TextDataset(ids, (ids > 0).long(), torch.tensor(labels), ("a", "b"), head)


def test_concat_puts_the_second_set_after_the_first_padded_to_the_wider():
    first, second = _rows([[5, 6], [7, 0]], [0, 1]), _rows([[8, 9, 4]], [1])
    joined = first.concat(second)
    assert joined.input_ids.tolist() == [[5, 6, 0], [7, 0, 0], [8, 9, 4]]
    assert joined.attention_mask.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    assert joined.labels.tolist() == [0, 1, 1]


def test_concat_pads_tagging_labels_with_the_ignore_index():
    first = _rows([[5, 6]], [[0, 1]], "tagging")
    second = _rows([[8, 9, 4]], [[1, 1, 0]], "tagging")
    assert first.concat(second).labels.tolist() == [[0, 1, -100], [1, 1, 0]]


def test_concat_refuses_sets_with_other_labels():
    other = TextDataset(torch.tensor([[5]]), torch.tensor([[1]]), torch.tensor([0]), ("x", "y"),
                        "classification")
    with pytest.raises(DataError, match="same labels and head"):
        _rows([[5]], [0]).concat(other)


def test_dataset_rejects_an_example_without_tokens():
    ids = torch.tensor([[5, 6], [0, 0]])
    with pytest.raises(DataError, match="example 1 has no real token"):
        TextDataset(ids, (ids > 0).long(), torch.tensor([0, 1]), ("a", "b"), "classification")


def test_dataset_rejects_left_padding():
    ids = torch.tensor([[5, 6], [0, 7]])
    with pytest.raises(DataError, match="example 1 is not right-padded"):
        TextDataset(ids, (ids > 0).long(), torch.tensor([0, 1]), ("a", "b"), "classification")
