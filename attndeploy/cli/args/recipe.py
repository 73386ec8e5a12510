"""The training recipe's options: how long, how fast, how regularised, and the gate density's
controls (`TrainConfig`). Each left out (None) is the preset's for what is trained."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from attndeploy.cli.args.base import OptionGroup
from attndeploy.cli.args.notes import DATA, PRETRAINED, TASK, by_data, by_preset
from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import SeedOption, shared
from attndeploy.training.config import TrainConfig

# option -> the TrainConfig field it sets, where the names differ
FIELDS = {"lr": "learning_rate", "new_lr": "new_learning_rate"}
# GA-Net's own distillation weight (its spec's presets)
_GANET_DISTILL = by_data(TASK.training_for("ganet").distill, DATA.training_for("ganet").distill)
# TrainConfig fields whose 0 means none
ZERO_IS_NONE = ("patience", "density_target", "density_calibrate")


@dataclass(frozen=True)
class Recipe:
    values: Mapping[str, Any]  # option -> its value (None: the preset's)

    def train_config(self, preset: TrainConfig) -> TrainConfig:
        """A built-in model's `TrainConfig`: `preset` with the options given (`--new-lr`
        applies to a converted model only)."""
        given = {FIELDS.get(name, name): value for name, value in self.values.items()
                 if value is not None and name != "new_lr"}
        given["max_seconds"] = self.values["max_seconds"]
        for name in ZERO_IS_NONE:
            given[name] = given.get(name, getattr(preset, name)) or None
        return dataclasses.replace(preset, **given)


class RecipeArgs(OptionGroup):
    """How the model trains."""

    @staticmethod
    def options(
        steps: Annotated[int | None, shared(
            "--steps", by_preset("steps"))] = None,
        max_epochs: Annotated[int | None, typer.Option(
            help=f"The most passes over the training data. {by_preset('max_epochs')}"
        )] = None,
        patience: Annotated[int | None, typer.Option(
            help="Stop after this many evaluations without a better validation score; 0 never "
                 "stops early. "
                 f"{by_data(TASK.training.patience or 0, DATA.training.patience, 0)}"
        )] = None,
        eval_every: Annotated[int, typer.Option(
            help="Evaluate for model selection every N steps; 0: after every epoch.")
        ] = field_default(TrainConfig, "eval_every"),
        batch_size: Annotated[
            int, shared("--batch-size", "(Examples per step.)")
        ] = field_default(TrainConfig, "batch_size"),
        lr: Annotated[float | None, typer.Option(
            "--lr", help=f"Peak learning rate (AdamW). {by_preset('learning_rate')}"
        )] = None,
        new_lr: Annotated[float | None, typer.Option(
            "--new-lr", help="--hf-model on pretrained weights: peak learning rate of the "
                             "parameters the conversion adds (the variant's own: QVI's maps, "
                             "Evolving Attention's convs, GA-Net's gate network). [default: "
                             f"{PRETRAINED.training.new_learning_rate:g}: at the encoder's "
                             "rate they barely leave their warm start]")
        ] = None,
        weight_decay: Annotated[float | None, typer.Option(
            help=f"AdamW weight decay. {by_preset('weight_decay')}")] = None,
        word_dropout: Annotated[float | None, typer.Option(
            help="Chance that a training token becomes <unk>. "
                 f"[default: {TASK.training.word_dropout:g} for a task; "
                 f"{DATA.training.word_dropout:g} for --data, "
                 f"{DATA.training_for('ganet').word_dropout:g} for GA-Net on --data (its "
                 "gates already drop words); 0 with --hf-model]")] = None,
        label_smoothing: Annotated[float | None, typer.Option(
            help=f"Label smoothing of the training loss. {by_preset('label_smoothing')}"
        )] = None,
        embedding_init: Annotated[float | None, typer.Option(
            help="Draw token and position embeddings from N(0, this^2) (0: PyTorch's N(0, 1)). "
                 f"{by_data(TASK.training.embedding_init, DATA.training.embedding_init)}"
        )] = None,
        weight_average: Annotated[float | None, typer.Option(
            help="Evaluate and keep a moving average of the weights with this decay (0: off). "
                 f"{by_preset('weight_average')}"
        )] = None,
        refit: Annotated[bool | None, typer.Option(
            "--refit/--no-refit",
            help="After choosing the best epoch on the validation split, train a fresh model on "
                 f"the training and validation examples for that many epochs + "
                 f"{DATA.training.refit_extra_epochs}, and save that one. "
                 f"{by_data(TASK.training.refit, DATA.training.refit)}"
        )] = None,
        seed: SeedOption = field_default(TrainConfig, "seed"),
        max_seconds: Annotated[
            float | None, typer.Option(help="Stop training after this many seconds.")
        ] = None,
        density_target: Annotated[float | None, typer.Option(
            help="GA-Net: the most held-out gate density (a ceiling); the penalty weight adapts "
                 "during training. 0: no target, a fixed --density-weight. "
                 f"{by_data(TASK.training.density_target, DATA.training.density_target)}")
        ] = None,
        density_calibrate: Annotated[float | None, typer.Option(
            help="GA-Net: at the end, move the gate threshold so that the validation density "
                 "(without a validation split, the training texts') is this. 0: leave the "
                 "threshold at 0. "
                 f"{by_data(TASK.training.density_calibrate, DATA.training.density_calibrate)}"
        )] = None,
        distill: Annotated[float | None, typer.Option(
            help="GA-Net: first train its dense-gate run (no density penalty), then learn from "
                 "its soft predictions with this weight beside the labels' (1 - this). 0: off. "
                 f"{_GANET_DISTILL}")] = None,
    ) -> None:
        """The training recipe's options."""

    def parse(self, values: Mapping[str, Any]) -> Recipe:
        return Recipe(self.values(values))
