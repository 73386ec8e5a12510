"""The recipe sized to the data (`attndeploy.training.recipe`)."""

from __future__ import annotations

import pytest

from attndeploy.errors import ConfigError
from attndeploy.training.config import PRETRAINED, TrainConfig
from attndeploy.training.recipe import sized_for, steps_per_epoch


def test_a_small_set_trains_more_epochs_until_the_run_reaches_min_steps():
    config = TrainConfig(batch_size=32, max_epochs=4, min_steps=300, steps=1_000_000)
    sized = sized_for(config, 200)  # 7 steps an epoch: 4 epochs would be 28 steps
    assert steps_per_epoch(config, 200) == 7
    assert sized.max_epochs == 43 and sized.max_epochs * 7 >= 300 > (sized.max_epochs - 1) * 7


def test_a_large_set_keeps_the_recipe_as_it_was():
    config = TrainConfig(batch_size=32, max_epochs=4, min_steps=300)
    assert sized_for(config, 3_300) == config  # 104 steps an epoch: 4 epochs are 416 steps


def test_no_floor_or_no_epoch_limit_leaves_the_config_alone():
    assert sized_for(TrainConfig(max_epochs=4), 10) == TrainConfig(max_epochs=4)
    unbounded = TrainConfig(max_epochs=None, min_steps=300)
    assert sized_for(unbounded, 10) == unbounded


def test_the_pretrained_recipe_has_a_step_floor_and_a_negative_one_is_refused():
    assert PRETRAINED.min_steps == 300 and PRETRAINED.max_epochs == 4
    assert TrainConfig().min_steps == 0  # built-in tasks and --data keep their recipe
    with pytest.raises(ConfigError, match="min_steps"):
        TrainConfig(min_steps=-1)
