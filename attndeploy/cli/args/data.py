"""The data's options: a built-in data set (`--dataset`, a task of `attndeploy.data`) or a
JSONL file, and how much of it trains, selects and
is held out (`load_training_data`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.cli.args.base import OptionGroup
from attndeploy.cli.args.notes import DATA, PRETRAINED, TASK
from attndeploy.cli.options import ModelFamily, readable_text_file, shared
from attndeploy.training.config import EVAL_FRACTION, N_EVAL, N_TRAIN


@dataclass(frozen=True)
class Data:
    task: str | None
    data: Path | None
    n_train: int
    n_eval: int
    n_val: int | None
    eval_fraction: float
    val_fraction: float | None
    min_freq: int | None
    truncate: bool
    model_family: str | None = None  # the family that reads --data; None: the file's keys say

    def load(self, defaults: Any, *, seed: int, max_seq: int) -> Any:
        """The training data (`load_training_data`); a split size left out is the preset's."""
        from attndeploy.train import load_training_data

        def pick(value: Any, default: Any) -> Any:
            return default if value is None else value

        return load_training_data(
            task=self.task, data_file=self.data, seed=seed, n_train=self.n_train,
            n_eval=self.n_eval, eval_fraction=self.eval_fraction, max_seq=max_seq,
            val_fraction=pick(self.val_fraction, defaults.val_fraction),
            n_val=pick(self.n_val, defaults.n_val), truncate=self.truncate,
            min_freq=pick(self.min_freq, defaults.min_freq), family=self.model_family,
        )


class DataArgs(OptionGroup):
    """What trains: a built-in task or a JSONL file, and its splits."""

    @staticmethod
    def options(
        dataset: Annotated[str | None, shared("--dataset")] = None,
        data: Annotated[
            Path | None, shared("--data", "Trained on instead of --dataset.",
                                callback=readable_text_file)
        ] = None,
        n_train: Annotated[
            int, typer.Option(help="Training examples of a built-in task.")] = N_TRAIN,
        n_eval: Annotated[
            int, typer.Option(help="Held-out examples of a built-in task.")] = N_EVAL,
        n_val: Annotated[int | None, typer.Option(
            help="Validation examples of a built-in task, for model selection; 0: select on "
                 f"the held-out set. [default: {TASK.n_val}]")] = None,
        eval_fraction: Annotated[
            float, typer.Option(help="Held-out share of a JSONL file.")
        ] = EVAL_FRACTION,
        val_fraction: Annotated[float | None, typer.Option(
            help="Share of a JSONL file's training part kept apart for model selection; 0: "
                 f"select on the held-out part. [default: {DATA.val_fraction:g}; "
                 f"{PRETRAINED.val_fraction:g} fine-tuning pretrained weights, which keep "
                 "the last step's weights]")] = None,
        min_freq: Annotated[int | None, typer.Option(
            help="JSONL: words seen fewer times in the training part encode as <unk>. "
                 f"[default: {DATA.min_freq}]")] = None,
        truncate: Annotated[bool, shared(
            "--truncate", "(JSONL; --hf-model: word pieces.)")] = False,
        model_family: Annotated[ModelFamily | None, typer.Option(  # type: ignore[valid-type]
            help="The kind of model trained (its family), which reads --data. [default: the "
                 "first family whose JSONL keys the file's first line holds: "
                 "{\"text\", \"label\"} is text-classification; a --dataset's own]")] = None,
    ) -> None:
        """The data's options."""

    def parse(self, values: Mapping[str, Any]) -> Data:
        from attndeploy.errors import ConfigError

        if values["dataset"] is not None and values["data"] is not None:
            raise ConfigError("give either --dataset or --data, not both")
        given = self.values(values)
        family = given.pop("model_family")
        return Data(task=given.pop("dataset"), model_family=None if family is None
                    else family.value, **given)
