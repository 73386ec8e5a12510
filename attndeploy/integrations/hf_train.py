"""Fine-tune a converted Hugging Face encoder as a text classifier and save an attndeploy
checkpoint (`attndeploy train --hf-model DIR_OR_CONFIG --variant V --data file.jsonl`).

The model comes from a local directory or file, never from the Hub:
- a `save_pretrained` directory with `config.json` and `model.safetensors` (or a sharded
  `model.safetensors.index.json`): the pretrained encoder, with a new classification head;
- a directory with `config.json` only, or a config JSON file: a model built from the config with
  random weights.
Weights in pickle files (`pytorch_model.bin`) are refused: attndeploy never unpickles.
`config.json`'s `model_type` picks the class (`bert`, `roberta`, `distilbert` ->
`*ForSequenceClassification`); the labels of the data set its head.

The tokenizer is the directory's (`tokenizer.json` holding WordPiece, or `vocab.txt`); without
one, a WordPiece vocabulary is trained on the training texts. A model built from a config then
takes the vocabulary's size and `[PAD]` (id 0) as its pad token; a pretrained model keeps its
embedding table, which must hold the vocabulary.

Data: a JSONL file of `{"text", "label"}` (split as `attndeploy train --data` splits it:
`eval_fraction` held out, then `val_fraction` of the rest kept for model selection) or a built-in
classification task (`sparse_evidence`; train, validation and held-out sets from different seeds),
whose word lists are rendered as text. Texts longer than `max_seq` tokens (`[CLS]` and `[SEP]`
included) are refused.

Training is `attndeploy.train`'s loop on a model that is already built (module docstring
there): epochs, selection on the validation set (else the held-out one) with the best weights kept,
`patience`/`max_epochs`/`steps`/`max_seconds` stops, GA-Net's density target, the weight average,
and a cosine schedule that ends at the last step the run can take (`max_epochs` epochs or `steps`,
whichever is fewer). The bag-of-words baseline (on the texts' words) joins the held-out metrics.
`embedding_init` does not apply (the encoder keeps its embeddings); word dropout replaces pieces
(never `[CLS]`, `[SEP]`) by `[UNK]`.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.data import TextDataset
from attndeploy.errors import CheckpointError, ConfigError
from attndeploy.integrations.hf_checkpoint import (
    HFClassifier,
    model_config_of,
    position_limit,
    save_hf_checkpoint,
)
from attndeploy.integrations.hf_data import (
    HFSource,
    HFTrainingData,
    fit_hf_baseline,
    load_hf_training_data,
    load_source,
)
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer
from attndeploy.integrations.transformers import convert, variant_config
from attndeploy.models import count_parameters
from attndeploy.train import TrainConfig, evaluate, task_loss
from attndeploy.training.averaging import WeightAverage
from attndeploy.training.baseline import compare_with_baseline
from attndeploy.training.density import DensityController
from attndeploy.training.selection import BestTracker

# ----------------------------------------------------------------------------- the model


def build_classifier(
    source: HFSource, data: HFTrainingData, variant: str, options: dict[str, Any], *,
    max_seq: int, seed: int = 0,
) -> HFClassifier:
    """The source's encoder with a classification head for the data's labels, converted."""
    import transformers

    config = source.config
    names = data.label_names
    config.num_labels = len(names)
    config.id2label = dict(enumerate(names))
    config.label2id = {name: i for i, name in enumerate(names)}
    if source.weights is None and source.tokenizer is None:
        config.vocab_size = len(data.tokenizer)  # a fresh model takes the trained vocabulary
        config.pad_token_id = data.tokenizer.pad_id
    if len(data.tokenizer) > config.vocab_size:
        raise ConfigError(f"the tokenizer has {len(data.tokenizer)} pieces but the model embeds "
                          f"{config.vocab_size}")
    if max_seq > position_limit(config):
        raise ConfigError(f"--max-seq {max_seq} exceeds the model's {position_limit(config)} "
                          "positions")
    variant_config(variant, options)  # refuse bad options before building anything
    cls = getattr(transformers, source.classifier)
    torch.manual_seed(seed)  # the new head and the variant's parameters
    if source.weights is not None:
        model = cls.from_pretrained(  # a local folder: no Hub access; a new head if the
            str(source.weights), config=config, local_files_only=True,  # labels differ
            use_safetensors=True, ignore_mismatched_sizes=True,
        )
    else:
        model = cls(config)
    convert(model, variant, **options)
    return HFClassifier(model, model_config_of(model, max_seq))


# ----------------------------------------------------------------------------- training


@dataclass
class HFTrainResult:
    model: HFClassifier
    metrics: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, float]]
    evaluations: list[dict[str, Any]] = field(default_factory=list)


def _learning_rate_factor(step: int, config: TrainConfig, horizon: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to 0 at `horizon` steps."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, horizon - config.warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _drop_pieces(input_ids: torch.Tensor, attention_mask: torch.Tensor, rate: float, unk: int,
                 keep: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Replace each real piece, the ids in `keep` ([CLS], [SEP]) excepted, by [UNK] with
    probability `rate`."""
    droppable = (attention_mask != 0) & ~torch.isin(input_ids, keep)  # [B, T]
    drop = (torch.rand(input_ids.shape, generator=generator) < rate) & droppable
    return torch.where(drop, torch.full_like(input_ids, unk), input_ids)  # [B, T]


def fine_tune(
    model: HFClassifier, train_set: TextDataset, eval_set: TextDataset, config: TrainConfig, *,
    density_weight: float = 0.0, val_set: TextDataset | None = None,
    tokenizer: WordPieceTokenizer | None = None, progress: bool = True,
) -> HFTrainResult:
    """Train `model` in place with `attndeploy train`'s loop (module docstring); returns it in
    eval mode with metrics on `eval_set`. Selection reads `val_set` when given, else
    `eval_set`; word dropout needs the `tokenizer` (its [UNK], [CLS] and [SEP])."""
    if not len(train_set):
        raise ConfigError("the training set is empty")
    if config.word_dropout and tokenizer is None:
        raise ConfigError("word dropout needs the tokenizer (its [UNK], [CLS] and [SEP] ids)")
    torch.manual_seed(config.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
    horizon = config.steps  # the most steps the run can take: the schedule ends there
    if config.max_epochs is not None:
        horizon = min(horizon, config.max_epochs * steps_per_epoch)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, config, horizon))
    controller = None
    if model.is_gated and config.density_target is not None:
        controller = DensityController(config.density_target, density_weight,
                                       rate=config.density_rate)
        density_weight = controller.weight
    average = WeightAverage(model, config.weight_average) if config.weight_average else None
    select_set = eval_set if val_set is None else val_set
    selecting = config.keep_best or config.patience is not None
    tracker = BestTracker(patience=config.patience,
                          density_target=config.density_target if model.is_gated else None)
    keep = torch.tensor([tokenizer.cls_id, tokenizer.sep_id]) if tokenizer is not None else None
    generator = torch.Generator().manual_seed(config.seed)
    history: list[dict[str, float]] = []
    evaluations: list[dict[str, Any]] = []
    started, paused, step, status = time.perf_counter(), 0.0, 0, ""

    def run_evaluation() -> None:  # evaluation time is not training time
        nonlocal paused, status
        pause_start = time.perf_counter()
        with average.swapped_in() if average is not None else nullcontext():
            record = {"step": step, "epoch": round(step / steps_per_epoch, 3),
                      "train_seconds": round(pause_start - started - paused, 3),
                      **evaluate(model, select_set)}
            if controller is not None:
                record["density_weight"] = controller.weight
            evaluations.append(record)
            if selecting:
                tracker.offer(record, model)  # copies the weights evaluated
                status = (f"best {tracker.best['accuracy']:.3f} @ epoch "
                          f"{tracker.best['epoch']:g}")
        paused += time.perf_counter() - pause_start

    def stop_reason() -> str | None:
        if config.max_seconds and time.perf_counter() - started - paused >= config.max_seconds:
            return "time"
        if tracker.should_stop:
            return "patience"
        return "steps" if step >= horizon else None

    bar = Progress(
        TextColumn(f"[bold]fine-tune {model.config.architecture} / {model.config.variant}"),
        BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("{task.fields[status]}"), TimeElapsedColumn(), disable=not progress,
    )
    with bar:
        task, reason = bar.add_task("train", total=horizon, status=""), None
        while reason is None:
            for input_ids, attention_mask, labels in train_set.batches(
                config.batch_size, shuffle=True, generator=generator,
                bucket=config.bucket_by_length,
            ):
                if config.word_dropout:
                    input_ids = _drop_pieces(input_ids, attention_mask, config.word_dropout,
                                             tokenizer.unk_id, keep, generator)
                out = model(input_ids, attention_mask, details=True)
                loss = task_loss(out["logits"], labels, config.label_smoothing)
                total = loss
                if "density_penalty" in out:
                    total = loss + density_weight * out["density_penalty"]
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                record = {"step": step + 1, "loss": loss.item(),
                          "learning_rate": optimizer.param_groups[0]["lr"]}
                optimizer.step()
                schedule.step()
                if average is not None:
                    average.update()
                step += 1
                if "density_penalty" in out:
                    record["soft_density"] = out["density_penalty"].item()
                    mask = attention_mask != 0
                    density = float(((out["gates"] & mask).sum(-1) / mask.sum(-1)).mean())
                    record["density"] = density
                    if controller is not None:
                        record["density_weight"] = density_weight
                        density_weight = controller.update(density)
                history.append(record)
                bar.update(task, advance=1, status=f"epoch {step / steps_per_epoch:.1f} "
                                                   f"loss {record['loss']:.3f} {status}")
                if config.eval_every and step % config.eval_every == 0:
                    run_evaluation()
                if (reason := stop_reason()) is not None:
                    break
            else:  # a whole epoch
                if not config.eval_every and selecting:
                    run_evaluation()
                    reason = stop_reason()
    if reason == "steps" and horizon < config.steps:
        reason = "epochs"
    seconds = time.perf_counter() - started - paused
    if selecting and (not evaluations or evaluations[-1]["step"] != step):
        run_evaluation()  # the last step is a candidate too
    if config.keep_best and tracker.best is not None:
        tracker.restore(model)
    elif average is not None:
        average.copy_to_model()
    model.eval()
    metrics = evaluate(model, eval_set)
    best = tracker.best if config.keep_best else None
    metrics["best_step"] = best["step"] if best else step
    metrics["best_epoch"] = best["epoch"] if best else round(step / steps_per_epoch, 3)
    if controller is not None:
        metrics["density_target"] = config.density_target
    selected_on = (None if not selecting else "validation" if val_set is not None
                   else "held_out")
    summary = {
        "config": asdict(config), "steps_done": step, "horizon_steps": horizon,
        "epochs_done": round(step / steps_per_epoch, 3), "steps_per_epoch": steps_per_epoch,
        "stopped_by": reason, "selected_on": selected_on, "evaluations": len(evaluations),
        "best_step": metrics["best_step"], "best_epoch": metrics["best_epoch"],
        "seconds": round(seconds, 3), "wall_seconds": round(time.perf_counter() - started, 3),
        "parameters": count_parameters(model),
        "final_loss": history[-1]["loss"] if history else None,
    }
    if best is not None and val_set is not None:
        summary["validation_accuracy"] = best["accuracy"]
    if controller is not None:
        summary["final_density_weight"] = controller.weight
    return HFTrainResult(model, metrics, summary, history, evaluations)


def train_hf_checkpoint(
    hf_model: Path,
    variant: str,
    out_dir: Path,
    *,
    options: dict[str, Any] | None = None,
    task: str | None = None,
    data_file: Path | None = None,
    train_config: TrainConfig | None = None,
    max_seq: int = 128,
    n_train: int = 4000,
    n_eval: int = 1000,
    n_val: int = 0,
    eval_fraction: float = 0.2,
    val_fraction: float = 0.0,
    force: bool = False,
    progress: bool = True,
) -> HFTrainResult:
    """Load, convert, fine-tune, evaluate (with the baseline beside) and save: the library side
    of `attndeploy train --hf-model`. `options` are fields of the variant's config."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:  # refuse before spending the training time
        raise CheckpointError(f"{out_dir} already exists; pass --force to replace it")
    if task is not None and data_file is not None:
        raise ConfigError("give either --task or --data, not both")
    # The encoder keeps its own embeddings: embedding_init does not apply.
    train_config = replace(train_config or TrainConfig(), embedding_init=0.0)
    options = dict(options or {})
    sub = variant_config(variant, options)
    source = load_source(Path(hf_model))
    data = load_hf_training_data(
        source, task=task, data_file=data_file, seed=train_config.seed, n_train=n_train,
        n_eval=n_eval, n_val=n_val, eval_fraction=eval_fraction, val_fraction=val_fraction,
        max_seq=max_seq,
    )
    model = build_classifier(source, data, variant, options, max_seq=max_seq,
                             seed=train_config.seed)
    if not model.is_gated:
        train_config = replace(train_config, density_target=None)  # no gates to steer
    density_weight = float(getattr(sub, "density_weight", 0.0)) if model.is_gated else 0.0
    result = fine_tune(model, data.train_set, data.eval_set, train_config,
                       density_weight=density_weight, val_set=data.val_set,
                       tokenizer=data.tokenizer, progress=progress)
    result.metrics.update(fit_hf_baseline(data))
    result.metrics.update(compare_with_baseline(result.metrics))
    origin = dict(data.source, hf_model=str(source.path),
                  pretrained=source.weights is not None)
    save_hf_checkpoint(
        result.model, out_dir, label_names=data.label_names, tokenizer=data.tokenizer,
        data=origin, training=result.summary, metrics=result.metrics, force=force,
    )
    return result
