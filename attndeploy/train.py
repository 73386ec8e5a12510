"""Training loop, model selection and held-out evaluation for every model family and variant.

Loss: the model family's (its training part's `loss`, `attndeploy.training.families`:
cross-entropy, optionally label-smoothed, for the built-in families) + λ·R for GA-Net (R = mean
soft gate over valid tokens); with a density target λ adapts so that the hard-gate density settles
near the target (`attndeploy.training.density`). Training counts epochs over the training set; the
selection set (a validation split when there is one, else the held-out set) is evaluated every
epoch or every `eval_every` steps, the best evaluation's weights are kept
(`attndeploy.training.selection`) and training stops after `patience` evaluations without a better
one, after `max_epochs`, `steps` or `max_seconds`. Evaluation runs in eval mode (hard gates for
GA-Net) and reports the family's metrics (accuracy for the built-in families; selection reads its
`PRIMARY_METRIC`), and for GA-Net the gate density and the count and rate of all-closed rescues
(docs/variants.md §3.7).
With `density_calibrate` the kept GA-Net model's gate threshold moves at the end so that the
validation set's density (without one, the training set's: never the held-out set's) is that
value (`attndeploy.training.calibration`).
With `refit` (real text) the selected run only chooses the epoch count, and a fresh model then
trains on the training and validation examples together (`attndeploy.training.refit`).

`fit` sets a run up and ends it; one step's loss and update are in `attndeploy.training.step`, the
run's bookkeeping (step count, training time, history, evaluations, λ) in `attndeploy.training.run`.

Two sets of defaults: `TrainConfig()` is tuned to the built-in synthetic tasks (300 steps), and
`REAL_TEXT_DEFAULTS` to real labelled text from a JSONL file, where
a few thousand examples overfit within a few epochs without regularisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.config import ModelConfig
from attndeploy.errors import ConfigError
from attndeploy.fsutil import check_replaceable
from attndeploy.models import AttnModel, build_model
from attndeploy.training import distill as distillation
from attndeploy.training.averaging import WeightAverage
from attndeploy.training.baseline import compare_with_baseline
from attndeploy.training.calibration import calibrate_gate_threshold
from attndeploy.training.config import (  # noqa: F401  (re-exported: the public names)
    DEFAULT_DENSITY_TARGET,
    REAL_TEXT,
    REAL_TEXT_DEFAULTS,
    TASK_DEFAULTS,
    Defaults,
    TrainConfig,
    defaults_for,
)
from attndeploy.training.data import (  # noqa: F401  (re-exported: the public names)
    TrainingData,
    fit_baseline,
    load_training_data,
)
from attndeploy.training.density import DensityController
from attndeploy.training.evaluation import (  # noqa: F401  (re-exported: the public names)
    IGNORE_INDEX,
    batch_density,
    evaluate,
    task_loss,
)
from attndeploy.training.families import training_part
from attndeploy.training.parameters import parameter_groups
from attndeploy.training.refit import refit_on_all_examples
from attndeploy.training.run import TrainingRun
from attndeploy.training.schedule import learning_rate_factor  # noqa: F401  (re-exported)
from attndeploy.training.selection import BestTracker
from attndeploy.variants.registry import variant_spec

UNK_ID = 1  # WordTokenizer.UNK_ID: what word dropout replaces a token with


@dataclass
class TrainResult:
    model: AttnModel
    metrics: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)


@torch.no_grad()
def _init_embeddings(model: AttnModel, std: float) -> None:
    """Token (and position) embeddings from N(0, std²), the pad row zero.

    nn.Embedding draws N(0, 1). A word seen a handful of times moves only a few learning-rate
    steps from its initial vector, so at N(0, 1) its embedding stays mostly random noise; at
    std ≈ 0.02 (BERT's and GPT-2's choice) it is mostly what training taught it. That matters on
    real text, where most words are rare.
    """
    for name in ("embed", "position"):
        table = getattr(model, name, None)
        if isinstance(table, torch.nn.Embedding):
            torch.nn.init.normal_(table.weight, 0.0, std)
            if table.padding_idx is not None:
                table.weight[table.padding_idx].zero_()


def _drop_words(input_ids: torch.Tensor, attention_mask: torch.Tensor, rate: float,
                generator: torch.Generator) -> torch.Tensor:
    """Replace each real token by <unk> with probability `rate` (pads stay pads)."""
    drop = (torch.rand(input_ids.shape, generator=generator) < rate) & (attention_mask != 0)
    return torch.where(drop, torch.full_like(input_ids, UNK_ID), input_ids)  # [B, T]


def train(
    model_config: ModelConfig,
    train_set: Any,
    eval_set: Any,
    config: TrainConfig,
    *,
    progress: bool = True,
    eval_every: int | None = None,
    val_set: Any = None,
) -> TrainResult:
    """Train a fresh model; returns it in eval mode with metrics on `eval_set` (see `fit`).

    With `config.refit` and a validation split, the selected run only chooses the epoch count: a
    fresh model then trains on the training and validation examples together for the best epoch
    + `refit_extra_epochs` epochs and is the one returned. `metrics` and `summary` keep where the
    best evaluation was; `summary["refit"]` describes the second run.
    With `config.distill` (GA-Net only) its dense-gate run trains first on the training split,
    as the teacher (`attndeploy.training.distill`), and both runs learn from it;
    `summary["teacher"]` describes it.
    """
    teacher = None
    if config.distill:
        teacher = _dense_gate_teacher(model_config, train_set, eval_set, config,
                                      progress=progress, eval_every=eval_every, val_set=val_set)
        if config.max_seconds is not None:
            config = replace(config, max_seconds=max(
                config.max_seconds - teacher.summary["seconds"], 1e-3))
    selected = _train_fresh(model_config, train_set, eval_set, config, progress=progress,
                            eval_every=eval_every, val_set=val_set, teacher=teacher)
    result = selected
    if config.refit and val_set is not None:
        def train_again(examples: Any, refit_config: TrainConfig) -> TrainResult:
            # The training examples come first: the teacher learnt from those, not from the
            # validation examples (refit_on_all_examples).
            taught = torch.arange(len(examples)) < len(train_set)  # [N]
            return _train_fresh(model_config, examples, eval_set, refit_config,
                                progress=progress, eval_every=0, val_set=val_set,
                                teacher=teacher, taught=taught, label="refit")

        result = refit_on_all_examples(train_again, train_set, val_set, config, selected)
    if teacher is not None:
        primary = training_part(train_set.head).PRIMARY_METRIC
        result.summary["teacher"] = {
            primary: teacher.metrics[primary], "best_epoch": teacher.metrics["best_epoch"],
            "seconds": teacher.summary["seconds"], "weight": config.distill,
            "temperature": config.distill_temperature}
        result.summary["seconds"] = round(result.summary["seconds"]
                                          + teacher.summary["seconds"], 3)
    return result


def _dense_gate_teacher(model_config: ModelConfig, train_set: Any, eval_set: Any,
                        config: TrainConfig, **kwargs: Any) -> TrainResult:
    """GA-Net's dense-gate run, trained to teach: the density penalty off, chosen on the
    validation split and not refit (`attndeploy.training.distill.teacher_training`)."""
    if not variant_spec(model_config.variant).gated:
        raise ConfigError(f"distillation from a dense-gate teacher applies to gated variants "
                          f"(GA-Net), not {model_config.variant!r}; leave --distill at 0")
    return _train_fresh(distillation.dense_gate_config(model_config), train_set, eval_set,
                        distillation.teacher_training(config), label="dense-gate teacher",
                        **kwargs)


def _train_fresh(
    model_config: ModelConfig,
    train_set: Any,
    eval_set: Any,
    config: TrainConfig,
    *,
    progress: bool,
    eval_every: int | None,
    val_set: Any,
    teacher: TrainResult | None = None,
    taught: torch.Tensor | None = None,
    label: str = "",
) -> TrainResult:
    torch.manual_seed(config.seed)
    model = build_model(model_config, getattr(train_set, "label_names", None))
    if config.embedding_init:
        _init_embeddings(model, config.embedding_init)

    def drop_words(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   generator: torch.Generator) -> torch.Tensor:
        return _drop_words(input_ids, attention_mask, config.word_dropout, generator)

    return fit(
        model, train_set, eval_set, config,
        density_weight=variant_spec(model_config.variant).density_weight(
            model_config.sub_config),
        label=f"train {model_config.variant} {label}".rstrip(), progress=progress,
        eval_every=eval_every, val_set=val_set,
        corrupt=drop_words if config.word_dropout else None, clean_gates=model.eval_gates,
        teacher=None if teacher is None else teacher.model, taught=taught,
    )


def fit(
    model: Any,
    train_set: Any,
    eval_set: Any,
    config: TrainConfig,
    *,
    density_weight: float = 0.0,
    label: str = "train",
    progress: bool = True,
    eval_every: int | None = None,
    val_set: Any = None,
    corrupt: Callable[[torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    clean_gates: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    teacher: Any = None,
    taught: torch.Tensor | None = None,
    before_step: Callable[[int, int], None] | None = None,
    new_parameters: set[str] | None = None,
) -> TrainResult:
    """Train `model` in place (a built-in model or a converted Hugging Face one: both take
    `(input_ids, attention_mask, details=True)`); returns it in eval mode with metrics on
    `eval_set`.

    Model selection (`keep_best`, `patience`, the density target's choice) reads `val_set` when
    one is given, else `eval_set`. `eval_every` overrides `config.eval_every`. Each entry of
    `evaluations` records the step, the epoch, the training time so far (evaluation time
    excluded) and the selection set's metrics. `density_weight` is GA-Net's starting λ.
    `corrupt(input_ids, attention_mask, generator)` replaces tokens of a training batch (word
    dropout); `clean_gates(input_ids, attention_mask)` gives the eval-mode gates of the
    uncorrupted batch, which the density controller then steers. `teacher` (a model in eval
    mode) mixes its soft targets on the uncorrupted examples (computed once, before the first
    step) into the loss with weight `config.distill` (`attndeploy.training.distill`); `taught`
    ([N] bool, default all) names the examples of `train_set` it learnt from, the only ones whose
    loss it enters. `before_step(step, horizon)` runs before each optimizer step (a warm-started
    conversion brings its variant in: `integrations.hf_train`). `new_parameters` names the
    parameters a pretrained model lacked, which train at `config.new_learning_rate`.
    """
    if not len(train_set):
        raise ConfigError("the training set is empty")
    model.train()
    run = _start_run(model, train_set, eval_set, config, density_weight=density_weight,
                     eval_every=eval_every, val_set=val_set, corrupt=corrupt,
                     clean_gates=clean_gates, teacher=teacher, taught=taught,
                     before_step=before_step, new_parameters=new_parameters)
    reason = _train_until_stopped(run, train_set, label=label, progress=progress)
    return _finish(run, reason, train_set, eval_set, val_set)


def _start_run(
    model: Any, train_set: Any, eval_set: Any, config: TrainConfig, *, density_weight: float,
    eval_every: int | None, val_set: Any, teacher: Any, new_parameters: set[str] | None,
    corrupt: Callable[[torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor] | None,
    clean_gates: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
    taught: torch.Tensor | None,
    before_step: Callable[[int, int], None] | None,
) -> TrainingRun:
    """A run of `fit` (whose arguments these are) with its optimizer, learning-rate schedule,
    density controller, weight average, selection and the teacher's soft targets, its clock
    started. `corrupt`, `clean_gates`, `taught` and `before_step` are handed to the run, whose
    steps call them."""
    optimizer = torch.optim.AdamW(parameter_groups(model, config, new_parameters),
                                  lr=config.learning_rate, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
    horizon = config.steps  # the most steps the run can take: the schedule ends there
    if config.max_epochs is not None:
        horizon = min(horizon, config.max_epochs * steps_per_epoch)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate_factor(step, config, horizon)
    )
    controller = None
    if model.is_gated and config.density_target is not None:
        controller = DensityController(config.density_target, density_weight,
                                       rate=config.density_rate)
        density_weight = 0.0 if config.density_warmup > 0 else controller.weight
    average = WeightAverage(model, config.weight_average) if config.weight_average else None
    family = training_part(train_set.head)
    tracker = BestTracker(patience=config.patience,
                          density_target=config.density_target if model.is_gated else None,
                          density_slack=config.density_slack, primary=family.PRIMARY_METRIC,
                          greater_is_better=family.GREATER_IS_BETTER)
    generator = torch.Generator().manual_seed(config.seed)
    soft_table = (None if teacher is None
                  else distillation.teacher_table(teacher, train_set, config.batch_size))
    return TrainingRun(
        model, config, optimizer, schedule, steps_per_epoch, horizon,
        every=config.eval_every if eval_every is None else eval_every,
        select_set=eval_set if val_set is None else val_set,
        selecting=config.keep_best or config.patience is not None, tracker=tracker,
        generator=generator, density_weight=density_weight, controller=controller,
        average=average, soft_table=soft_table, taught=taught, corrupt=corrupt,
        clean_gates=clean_gates, before_step=before_step,
    )


def _train_until_stopped(run: TrainingRun, train_set: Any, *, label: str, progress: bool) -> str:
    """Take steps epoch after epoch, evaluating every `run.every` steps (0: after each epoch,
    when selecting) until the run should stop; returns why ("time", "patience" or "steps")."""
    config = run.config
    bar = Progress(
        # sized for an 80-column terminal: label, a short bar, steps, status, time
        TextColumn(f"[bold]{label}"), BarColumn(bar_width=12),
        TextColumn("{task.completed}/{task.total}"), TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(), disable=not progress, transient=False,
    )
    with bar:
        task = bar.add_task("train", total=run.horizon, status="")
        reason = None
        while reason is None:
            for rows in train_set.batch_rows(
                config.batch_size, shuffle=True, generator=run.generator,
                bucket=config.bucket_by_length,
            ):
                record = run.take_step(train_set, rows)
                bar.update(task, advance=1,
                           status=f"ep {run.epochs:.1f} loss {record['loss']:.3f} "
                                  f"{run.status}")
                if run.every and run.step % run.every == 0:
                    run.record_evaluation()
                reason = run.stop_reason()
                if reason is not None:
                    break
            else:  # a whole epoch
                if not run.every and run.selecting:
                    run.record_evaluation()
                    reason = run.stop_reason()
    return reason


def _finish(run: TrainingRun, reason: str, train_set: Any, eval_set: Any,
            val_set: Any) -> TrainResult:
    """End a stopped run: evaluate its last step too when selecting, keep the selected (or
    averaged) weights, calibrate the gate threshold when asked, and evaluate `eval_set`."""
    model, config = run.model, run.config
    if reason == "steps" and run.horizon < config.steps:
        reason = "epochs"
    seconds = run.training_seconds()
    if run.selecting and (not run.evaluations or run.evaluations[-1]["step"] != run.step):
        run.record_evaluation()  # the last step is a candidate too
    if config.keep_best and run.tracker.best is not None:
        run.tracker.restore(model)
    elif run.average is not None:
        run.average.copy_to_model()
    calibration: dict[str, Any] | None = None
    if run.controller is not None and config.density_calibrate is not None:
        shifted = calibrate_gate_threshold(  # texts only, no labels: but never held out
            model, train_set if val_set is None else val_set, config.density_calibrate)
        calibration = {**shifted, "on": "training" if val_set is None else "validation"}
    model.eval()
    metrics = evaluate(model, eval_set)
    best = run.tracker.best if config.keep_best else None
    metrics["best_step"] = best["step"] if best else run.step
    metrics["best_epoch"] = best["epoch"] if best else round(run.epochs, 3)
    if run.controller is not None:
        metrics["density_target"] = config.density_target
    summary = run.summary(reason, seconds, metrics, best=best, validated=val_set is not None,
                          calibration=calibration)
    return TrainResult(model, metrics, summary, run.history, run.evaluations)


def train_checkpoint(
    model_config: ModelConfig,
    data: TrainingData,
    config: TrainConfig,
    out_dir: Any,
    *,
    force: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train, evaluate on the held-out set, compare with the baseline and save the checkpoint
    atomically. The baseline's numbers join the model's in `metrics`."""
    from pathlib import Path

    from attndeploy.checkpoint import save_checkpoint
    from attndeploy.errors import CheckpointError

    out_dir = Path(out_dir)
    check_replaceable(out_dir, force=force, error=CheckpointError)  # before the training time
    if not variant_spec(model_config.variant).gated:
        config = replace(config, density_target=None)  # only GA-Net has gates to steer
    result = train(model_config, data.train_set, data.eval_set, config, progress=progress,
                   val_set=data.val_set)
    result.metrics.update(fit_baseline(data))
    family = training_part(data.head)
    result.metrics.update(compare_with_baseline(result.metrics, primary=family.PRIMARY_METRIC,
                                                greater_is_better=family.GREATER_IS_BETTER))
    save_checkpoint(
        result.model, out_dir, label_names=data.label_names, tokenizer=data.tokenizer,
        data=data.source, training=result.summary, metrics=result.metrics, force=force,
    )
    return result
