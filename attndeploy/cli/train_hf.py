"""`attndeploy train --hf-model DIR_OR_CONFIG`: fine-tune a Hugging Face BERT-family encoder
with an attndeploy variant and save a checkpoint that export, validate, package and serve take.

`train_hf_command` is called by `attndeploy train` (cli/train.py) when `--hf-model` is given;
the library side is `attndeploy.integrations.hf_train.train_hf_checkpoint`. Training settings
left out (None) take the defaults of the model and the data (`training.config.defaults_for`):
pretrained weights (a folder with model.safetensors) fine-tune with `PRETRAINED_DEFAULTS`, the
BERT-family recipe; a model built from a config (random weights) takes `attndeploy train`'s
defaults for a built-in task or a --data file, except word dropout, which is off: those defaults
were tuned for word vocabularies trained from scratch, and a converted encoder reads WordPiece
pieces.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from attndeploy.cli.output import console, print_json, print_warning

UNTOKENIZED = (
    "{folder} holds pretrained weights but no tokenizer (tokenizer.json or vocab.txt): a "
    "WordPiece vocabulary will be trained on the training texts, and its piece ids are not the "
    "ones the pretrained embedding table was trained with, so every piece starts from another "
    "piece's embedding (the pretraining is largely lost); copy the model's own tokenizer.json "
    "into the folder"
)


def train_hf_command(
    *,
    hf_model: Path,
    variant: str,
    variant_config: Any,
    out: Path,
    task: str | None,
    data: Path | None,
    max_seq: int,
    steps: int | None,
    batch_size: int,
    lr: float | None,
    seed: int,
    n_train: int,
    n_eval: int,
    eval_fraction: float,
    max_seconds: float | None,
    force: bool,
    json_output: bool,
    max_epochs: int | None = None,
    patience: int | None = None,
    eval_every: int = 0,
    weight_decay: float | None = None,
    label_smoothing: float | None = None,
    word_dropout: float | None = None,
    weight_average: float | None = None,
    density_target: float | None = None,
    density_calibrate: float | None = None,
    n_val: int | None = None,
    val_fraction: float | None = None,
    truncate: bool = False,
    new_lr: float | None = None,
    distill: float | None = None,
) -> None:
    """Fine-tune `hf_model` (a local `save_pretrained` directory or a config JSON file; nothing
    is downloaded) with `variant`'s attention and save the checkpoint `out`.

    `variant_config`: the variant's config dataclass as `attndeploy train` builds it from its
    options (`--alpha`, `--beta`, `--qvi-form`, `--aux`, `--option NAME=VALUE`...), or None for
    a variant without one. The model's sizes come from its config (`--d-model`, `--heads`,
    `--layers` and `--d-ff` do not apply). `patience`, `density_target` and
    `density_calibrate` 0 mean none; left out, the calibration follows `density_target` where
    the preset calibrates to its own target. `max_epochs` given turns the preset's step floor
    (`min_steps`: more epochs on a small set, `training.recipe`) off. `distill` (GA-Net): first
    fine-tune the dense-gate run, then learn from its soft predictions with this weight; 0 or
    None (the preset's) is off.
    """
    from attndeploy.cli.info import print_probe_verdict
    from attndeploy.cli.output import summary_lines
    from attndeploy.errors import CheckpointError, ConfigError
    from attndeploy.fsutil import check_output_dir, check_replaceable
    from attndeploy.integrations.hf_data import load_source
    from attndeploy.integrations.hf_train import train_hf_checkpoint
    from attndeploy.training.baseline import probe_verdict
    from attndeploy.training.config import defaults_for

    if task is not None and data is not None:
        raise ConfigError("give either --dataset or --data, not both")
    check_output_dir(out)  # a file in the way, a read-only place: refused before training
    check_replaceable(out, force=force, error=CheckpointError)
    options = dataclasses.asdict(variant_config) if variant_config is not None else {}
    source = load_source(Path(hf_model))
    pretrained = source.weights is not None
    if pretrained and source.tokenizer is None:
        print_warning(UNTOKENIZED.format(folder=hf_model))
    defaults = defaults_for(real_text=data is not None, pretrained=pretrained)
    preset = defaults.training_for(variant)

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    train_config = dataclasses.replace(
        preset, steps=pick(steps, preset.steps), batch_size=batch_size,
        learning_rate=pick(lr, preset.learning_rate), seed=seed,
        new_learning_rate=pick(new_lr, preset.new_learning_rate),
        max_seconds=max_seconds, max_epochs=pick(max_epochs, preset.max_epochs),
        min_steps=preset.min_steps if max_epochs is None else 0,  # --max-epochs is obeyed
        patience=pick(patience, preset.patience) or None, eval_every=eval_every,
        weight_decay=pick(weight_decay, preset.weight_decay),
        label_smoothing=pick(label_smoothing, preset.label_smoothing),
        word_dropout=pick(word_dropout, 0.0),
        weight_average=pick(weight_average, preset.weight_average),
        density_target=pick(density_target, preset.density_target) or None,
        density_calibrate=pick(density_calibrate,
                               _calibration_default(preset, density_target)) or None,
        distill=pick(distill, preset.distill),
        embedding_init=0.0,
    )
    result = train_hf_checkpoint(
        hf_model, variant, out, options=options, task=task, data_file=data,
        train_config=train_config, max_seq=max_seq, n_train=n_train, n_eval=n_eval,
        n_val=pick(n_val, defaults.n_val), eval_fraction=eval_fraction,
        val_fraction=pick(val_fraction, defaults.val_fraction), force=force,
        progress=not json_output, truncate=truncate,
    )
    if json_output:
        print_json({"checkpoint": str(out), "metrics": result.metrics,
                    "training": result.summary})
        return
    console.print(summary_lines(out, result.metrics, result.summary))
    print_probe_verdict(probe_verdict(result.metrics))
    if "density_shortfall" in result.summary:
        print_warning(result.summary["density_shortfall"])


def _calibration_default(preset: Any, density_target: float | None) -> float | None:
    """The gate calibration a run takes unless `--density-calibrate` is given: the preset's,
    except that where the preset calibrates to its own target (the pretrained GA-Net preset), a
    `--density-target` given moves the calibration with it."""
    if (density_target and preset.density_calibrate is not None
            and preset.density_calibrate == preset.density_target):
        return density_target
    return preset.density_calibrate
