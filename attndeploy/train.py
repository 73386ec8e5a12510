"""Training loop, model selection and held-out evaluation for every model family and variant.

Loss: cross-entropy (optionally label-smoothed) + λ·R for GA-Net (R = mean soft gate over valid
tokens); with a density target λ adapts so that the hard-gate density settles near the target
(`attndeploy.training.density`). Training counts epochs over the training set; the selection set
(a validation split when there is one, else the held-out set) is evaluated every epoch or every
`eval_every` steps, the best evaluation's weights are kept (`attndeploy.training.selection`) and
training stops after `patience` evaluations without a better one, after `max_epochs`, `steps` or
`max_seconds`. Evaluation runs in eval mode (hard gates for GA-Net) and reports accuracy, and for
GA-Net the gate density and the count and rate of all-closed rescues (docs/variants.md §3.7).
With `density_calibrate` the kept GA-Net model's gate threshold moves at the end so that the
validation set's density (without one, the training set's: never the held-out set's) is that
value (`attndeploy.training.calibration`).
With `refit` (real text) the selected run only chooses the epoch count, and a fresh model then
trains on the training and validation examples together (`attndeploy.training.refit`).

Two sets of defaults: `TrainConfig()` is tuned to the built-in synthetic tasks (300 steps), and
`REAL_TEXT_DEFAULTS` to real labelled text from a JSONL file, where
a few thousand examples overfit within a few epochs without regularisation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.config import ModelConfig
from attndeploy.errors import ConfigError
from attndeploy.fsutil import already_exists
from attndeploy.models import AttnModel, build_model, count_parameters
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
from attndeploy.training.density import DensityController, scheduled_target
from attndeploy.training.evaluation import (  # noqa: F401  (re-exported: the public names)
    IGNORE_INDEX,
    batch_density,
    evaluate,
    task_loss,
)
from attndeploy.training.parameters import parameter_groups
from attndeploy.training.refit import refit_on_all_examples
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
        result.summary["teacher"] = {
            "accuracy": teacher.metrics["accuracy"], "best_epoch": teacher.metrics["best_epoch"],
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
    model = build_model(model_config)
    if config.embedding_init:
        _init_embeddings(model, config.embedding_init)

    def drop_words(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   generator: torch.Generator) -> torch.Tensor:
        return _drop_words(input_ids, attention_mask, config.word_dropout, generator)

    return fit(
        model, train_set, eval_set, config,
        density_weight=(variant_spec(model_config.variant).training.penalty_weight(
                            model_config.sub_config) if model.is_gated else 0.0),
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
    every = config.eval_every if eval_every is None else eval_every
    select_set = eval_set if val_set is None else val_set
    selecting = config.keep_best or config.patience is not None
    tracker = BestTracker(patience=config.patience,
                          density_target=config.density_target if model.is_gated else None,
                          density_slack=config.density_slack)
    generator = torch.Generator().manual_seed(config.seed)
    soft_table = (None if teacher is None
                  else distillation.teacher_table(teacher, train_set, config.batch_size))
    history: list[dict[str, float]] = []
    evaluations: list[dict[str, Any]] = []
    started = time.perf_counter()
    paused = 0.0  # seconds spent in periodic evaluation, excluded from the training time
    step = 0
    status = ""

    def training_seconds() -> float:
        return time.perf_counter() - started - paused

    def run_evaluation() -> None:
        nonlocal paused, status
        pause_start = time.perf_counter()
        with average.swapped_in() if average is not None else nullcontext():
            record = {"step": step, "epoch": round(step / steps_per_epoch, 3),
                      "train_seconds": round(pause_start - started - paused, 3),
                      **evaluate(model, select_set)}
            if controller is not None:
                record["density_weight"] = density_weight
            evaluations.append(record)
            if selecting:
                tracker.offer(record, model)  # copies the weights evaluated
                best = tracker.best
                status = f"best {best['accuracy']:.3f} @ epoch {best['epoch']:g}"
        paused += time.perf_counter() - pause_start

    def stop_reason() -> str | None:
        if config.max_seconds and training_seconds() >= config.max_seconds:
            return "time"
        if tracker.should_stop:
            return "patience"
        return "steps" if step >= horizon else None

    bar = Progress(
        TextColumn(f"[bold]{label}"), BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"), TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(), disable=not progress, transient=False,
    )
    with bar:
        task = bar.add_task("train", total=horizon, status="")
        reason = None
        while reason is None:
            for rows in train_set.batch_rows(
                config.batch_size, shuffle=True, generator=generator,
                bucket=config.bucket_by_length,
            ):
                input_ids, attention_mask, labels = train_set.batch_at(rows)  # [B, t]
                if before_step is not None:
                    before_step(step, horizon)
                clean_ids = input_ids
                if corrupt is not None:
                    input_ids = corrupt(input_ids, attention_mask, generator)
                out = model(input_ids, attention_mask, details=True)
                loss = task_loss(out["logits"], labels, config.label_smoothing)
                total = loss
                if teacher is not None:
                    soft_targets = distillation.batch_targets(soft_table, rows,
                                                              input_ids.shape[1])
                    total = (1 - config.distill) * loss + config.distill * (
                        distillation.distillation_loss(
                            out["logits"], soft_targets, labels, config.distill_temperature,
                            taught=None if taught is None else taught[rows]))
                if "density_penalty" in out:
                    total = total + density_weight * out["density_penalty"]
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                learning_rate = optimizer.param_groups[0]["lr"]  # this step's
                optimizer.step()
                schedule.step()
                if average is not None:
                    average.update()
                step += 1
                record = {"step": step, "loss": loss.item(), "learning_rate": learning_rate}
                if "density_penalty" in out:
                    record["soft_density"] = out["density_penalty"].item()
                    record["density"] = batch_density(out["gates"], attention_mask)
                    if controller is not None:
                        record["density_weight"] = density_weight
                        goal = scheduled_target(config.density_target, step / steps_per_epoch,
                                                warmup=config.density_warmup,
                                                anneal=config.density_anneal)
                        # Steer what evaluation measures: the gates of the words themselves,
                        # not of the <unk> that word dropout put in their place.
                        clean = record["density"]
                        if clean_gates is not None and clean_ids is not input_ids:
                            clean = batch_density(clean_gates(clean_ids, attention_mask),
                                                   attention_mask)
                            record["clean_density"] = clean
                        density_weight = (0.0 if goal is None
                                          else controller.update(clean, goal))
                history.append(record)
                bar.update(task, advance=1,
                           status=f"epoch {step / steps_per_epoch:.1f} loss {record['loss']:.3f} "
                                  f"{status}")
                if every and step % every == 0:
                    run_evaluation()
                reason = stop_reason()
                if reason is not None:
                    break
            else:  # a whole epoch
                if not every and selecting:
                    run_evaluation()
                    reason = stop_reason()
    if reason == "steps" and horizon < config.steps:
        reason = "epochs"
    seconds = training_seconds()
    if selecting and (not evaluations or evaluations[-1]["step"] != step):
        run_evaluation()  # the last step is a candidate too
    if config.keep_best and tracker.best is not None:
        tracker.restore(model)
    elif average is not None:
        average.copy_to_model()
    calibration: dict[str, Any] | None = None
    if controller is not None and config.density_calibrate is not None:
        shifted = calibrate_gate_threshold(  # texts only, no labels: but never held out
            model, train_set if val_set is None else val_set, config.density_calibrate)
        calibration = {**shifted, "on": "training" if val_set is None else "validation"}
    model.eval()
    metrics = evaluate(model, eval_set)
    best = tracker.best if config.keep_best else None
    metrics["best_step"] = best["step"] if best else step
    metrics["best_epoch"] = best["epoch"] if best else round(step / steps_per_epoch, 3)
    if controller is not None:
        metrics["density_target"] = config.density_target
    summary = {
        "config": asdict(config),
        "steps_done": step,
        "horizon_steps": horizon,
        "epochs_done": round(step / steps_per_epoch, 3),
        "steps_per_epoch": steps_per_epoch,
        "stopped_by": reason,
        "selected_on": None if not selecting else "validation" if val_set is not None
        else "held_out",
        "evaluations": len(evaluations),
        "best_step": metrics["best_step"],
        "best_epoch": metrics["best_epoch"],
        "seconds": round(seconds, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "parameters": count_parameters(model),
        "final_loss": history[-1]["loss"] if history else None,
    }
    if best is not None and val_set is not None:
        summary["validation_accuracy"] = best["accuracy"]
    if history and "soft_density" in history[-1]:
        summary["final_soft_density"] = history[-1]["soft_density"]
    if controller is not None:
        summary["final_density_weight"] = controller.weight
    if calibration is not None:
        summary["gate_calibration"] = calibration
    return TrainResult(model, metrics, summary, history, evaluations)


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
    if out_dir.exists() and not force:  # refuse before spending the training time
        raise CheckpointError(already_exists(out_dir))
    if not variant_spec(model_config.variant).gated:
        config = replace(config, density_target=None)  # only GA-Net has gates to steer
    result = train(model_config, data.train_set, data.eval_set, config, progress=progress,
                   val_set=data.val_set)
    result.metrics.update(fit_baseline(data))
    result.metrics.update(compare_with_baseline(result.metrics))
    save_checkpoint(
        result.model, out_dir, label_names=data.label_names, tokenizer=data.tokenizer,
        data=data.source, training=result.summary, metrics=result.metrics, force=force,
    )
    return result
