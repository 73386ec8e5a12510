"""The shape grid, `--shapes` parsing and the deterministic inputs."""

from __future__ import annotations

import numpy as np
import pytest

from attndeploy.errors import ValidationError
from attndeploy.validate.grid import (
    Shape,
    as_shapes,
    check_shapes,
    default_grid,
    default_reference_shapes,
    make_inputs,
    parse_shapes,
)


def test_parse_shapes_reads_batch_x_seq_and_drops_duplicates():
    assert parse_shapes("1x1,4x17, 8X64 ,4x17") == (Shape(1, 1), Shape(4, 17), Shape(8, 64))
    assert str(Shape(4, 17)) == "4x17"


@pytest.mark.parametrize("text", ["", "4", "4x", "x3", "4x17x2", "-1x3", "0x3", "2x0", "a,b"])
def test_parse_shapes_refuses_what_is_not_a_shape(text):
    with pytest.raises(ValidationError):
        parse_shapes(text)


def test_as_shapes_accepts_strings_tuples_and_shapes():
    assert as_shapes(["2x3", (1, 1), Shape(2, 3)]) == (Shape(2, 3), Shape(1, 1))


def test_default_grid_covers_seq_one_the_limit_odd_sizes_and_padded_batches():
    grid = default_grid(128)
    seqs = {s.seq for s in grid}
    assert 1 in seqs and 128 in seqs
    assert any(s.seq % 2 == 1 and s.seq > 1 for s in grid)
    assert any(s.batch % 2 == 1 and s.batch > 1 for s in grid)
    padded = [s for s in grid if s.padded]
    assert padded
    for shape in padded:
        lengths = shape.lengths()
        assert max(lengths) == shape.seq and min(lengths) < shape.seq
    assert len(set(grid)) == len(grid)


def test_default_grid_never_exceeds_the_graph_limit():
    for max_seq in (2, 7, 32):
        grid = default_grid(max_seq)
        assert all(s.seq <= max_seq for s in grid)
        assert {1, max_seq} <= {s.seq for s in grid}


def test_inputs_are_deterministic_in_range_and_right_padded():
    shape = Shape(6, 11)
    feed = make_inputs(shape, vocab_size=20, seed=3)
    again = make_inputs(shape, vocab_size=20, seed=3)
    other = make_inputs(shape, vocab_size=20, seed=4)
    assert all(np.array_equal(feed[k], again[k]) for k in feed)
    assert not np.array_equal(feed["input_ids"], other["input_ids"])
    ids, mask = feed["input_ids"], feed["attention_mask"]
    assert ids.dtype == np.int64 and mask.dtype == np.int64 and ids.shape == (6, 11)
    real = mask.astype(bool)
    assert ids[real].min() >= 2 and ids[real].max() < 20
    assert (ids[~real] == 0).all()
    assert (mask.sum(1) >= 1).all()  # every row has a real token
    assert (np.diff(mask, axis=1) <= 0).all()  # 1…1 0…0
    assert tuple(mask.sum(1)) == shape.lengths(3)
    assert mask[0].all() and mask[1].sum() == 1  # one full row, one single-token row


def test_a_shapes_inputs_do_not_depend_on_the_rest_of_the_grid():
    a = make_inputs(Shape(4, 17), vocab_size=50, seed=0)
    make_inputs(Shape(2, 5), vocab_size=50, seed=0)
    b = make_inputs(Shape(4, 17), vocab_size=50, seed=0)
    assert np.array_equal(a["input_ids"], b["input_ids"])


def test_reference_shapes_are_a_small_subset_with_a_padded_batch():
    grid = default_grid(128)
    chosen = default_reference_shapes(grid)
    assert 0 < len(chosen) <= 4
    assert set(chosen) <= set(grid)
    assert any(s.padded for s in chosen)
    assert all(s.batch * s.seq <= 48 for s in chosen)


def test_shapes_longer_than_the_graph_limit_are_refused_by_name():
    check_shapes((Shape(2, 32),), 32, "model.onnx")
    with pytest.raises(ValidationError, match=r"4x40.*maximum sequence length 32"):
        check_shapes((Shape(1, 1), Shape(4, 40)), 32, "model.onnx")
