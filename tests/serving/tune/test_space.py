"""The candidate space: names, preferred batch sizes, which dimensions apply, pruning."""

from __future__ import annotations

import pytest

from attndeploy.errors import ConfigError
from attndeploy.serving.tune.space import Candidate, SearchSpace


def candidate(**changes) -> Candidate:
    values = {"max_batch_size": 8, "max_queue_delay_us": 500, "instances": 1, "threads": 1}
    return Candidate(**(values | changes))


def test_a_candidate_is_named_by_its_values_and_only_says_what_differs_from_plain():
    assert candidate().name == "b8-d500-i1-t1"
    assert candidate(preferred="max", precision="int8", text_instances=2,
                     text_queue_delay_us=0).name == "b8-d500-i1-t1-pmax-int8-ti2-td0"
    assert candidate(preferred="4,8").name == "b8-d500-i1-t1-p4.8"


@pytest.mark.parametrize(("preferred", "sizes"), [
    ("none", ()), ("max", (8,)), ("half+max", (4, 8)), ("2,8,32", (2, 8)),
])
def test_preferred_batch_sizes_follow_the_max_batch_size(preferred, sizes):
    assert candidate(preferred=preferred).preferred_sizes() == sizes


def test_a_candidate_refuses_impossible_values_in_one_error():
    with pytest.raises(ConfigError) as error:
        Candidate(max_batch_size=-1, max_queue_delay_us=0, instances=0, threads=1,
                  precision="fp8", text_instances=1)
    message = str(error.value)
    for fragment in ("max_batch_size", "instances", "precision", "text_instances and"):
        assert fragment in message


def test_the_dimensions_hold_the_candidate_s_own_value_and_skip_what_does_not_apply():
    space = SearchSpace(max_batch_size=(4, 16), threads=(1,))
    names = {d.name: d for d in space.dimensions(candidate(max_batch_size=12))}
    assert names["max_batch_size"].values == (4, 12, 16)
    assert "threads" not in names  # one value: nothing to walk
    assert "text_instances" not in names  # no text model
    assert not names["preferred"].ordered
    unbatched = {d.name for d in space.dimensions(candidate(max_batch_size=0))}
    assert not unbatched & {"max_batch_size", "max_queue_delay_us", "preferred"}


def test_int8_is_offered_beside_fp32():
    assert SearchSpace().with_int8().precision == ("fp32", "int8")


def test_more_onnxruntime_threads_than_cores_are_pruned_unmeasured():
    space = SearchSpace(cores=2)
    assert space.pruned(candidate(instances=2, threads=1)) is None
    assert "4 onnxruntime threads on 2 core(s)" in space.pruned(candidate(instances=2, threads=2))


def test_a_space_with_an_empty_or_negative_dimension_is_refused():
    with pytest.raises(ConfigError, match="instances has no value"):
        SearchSpace(instances=())
    with pytest.raises(ConfigError, match="max_queue_delay_us must be integers >= 0"):
        SearchSpace(max_queue_delay_us=(-1, 0))
