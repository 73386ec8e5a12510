"""`attndeploy train --hf-model DIR_OR_CONFIG`: fine-tune a Hugging Face BERT-family encoder
with an attndeploy variant and save a checkpoint that export, validate, package and serve take.

`train_hf_command` is called by `attndeploy train` (cli/train.py) when `--hf-model` is given;
the library side is `attndeploy.integrations.hf_train.train_hf_checkpoint`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from attndeploy.cli.output import console, print_json


def train_hf_command(
    *,
    hf_model: Path,
    variant: str,
    variant_config: Any,
    out: Path,
    task: str | None,
    data: Path | None,
    max_seq: int,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    n_train: int,
    n_eval: int,
    eval_fraction: float,
    max_seconds: float | None,
    force: bool,
    json_output: bool,
) -> None:
    """Fine-tune `hf_model` (a local `save_pretrained` directory or a config JSON file; nothing
    is downloaded) with `variant`'s attention and save the checkpoint `out`.

    `variant_config`: the variant's config dataclass as `attndeploy train` builds it from its
    options (`--alpha`, `--beta`, `--qvi-form`, `--aux`, `--option NAME=VALUE`...), or None for
    a variant without one. The model's sizes come from its config (`--d-model`, `--heads`,
    `--layers` and `--d-ff` do not apply).
    """
    from attndeploy.errors import ConfigError
    from attndeploy.fsutil import check_output_dir
    from attndeploy.integrations.hf_train import train_hf_checkpoint
    from attndeploy.train import TrainConfig

    if task is not None and data is not None:
        raise ConfigError("give either --task or --data, not both")
    check_output_dir(out)  # a file in the way, a read-only place: refused before training
    options = dataclasses.asdict(variant_config) if variant_config is not None else {}
    train_config = TrainConfig(steps=steps, batch_size=batch_size, learning_rate=lr, seed=seed,
                               max_seconds=max_seconds)
    result = train_hf_checkpoint(
        hf_model, variant, out, options=options, task=task, data_file=data,
        train_config=train_config, max_seq=max_seq, n_train=n_train, n_eval=n_eval,
        eval_fraction=eval_fraction, force=force, progress=not json_output,
    )
    if json_output:
        print_json({"checkpoint": str(out), "metrics": result.metrics,
                    "training": result.summary})
        return
    metrics = ", ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.metrics.items()
    )
    console.print(f"saved [bold]{out}[/] ({result.model.config.architecture} / {variant}, "
                  f"{result.summary['seconds']:.1f} s): {metrics}")
