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

Data: a JSONL file of `{"text", "label"}` (split into train and held-out parts) or a built-in
classification task (`sparse_evidence`), whose word lists are rendered as text. Texts longer than
`max_seq` tokens (`[CLS]` and `[SEP]` included) are refused.

Training: AdamW, linear warm-up then cosine decay, gradient clipping at 1.0, cross-entropy plus
GA-Net's density penalty (`density_weight` · R) for gated models; held-out metrics by
`attndeploy.train.evaluate` (accuracy; GA-Net: gate density and rescues).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.data import TextDataset, get_task, read_jsonl
from attndeploy.errors import CheckpointError, ConfigError, DataError
from attndeploy.integrations.hf_checkpoint import (
    HFClassifier,
    model_config_of,
    position_limit,
    safe_config_dict,
    save_hf_checkpoint,
)
from attndeploy.integrations.hf_tokenizer import DEFAULT_VOCAB_SIZE, WordPieceTokenizer
from attndeploy.integrations.transformers import convert, variant_config
from attndeploy.models import count_parameters
from attndeploy.train import TrainConfig, evaluate, task_loss

# model_type -> the sequence classifier trained on top of that encoder
CLASSIFIERS = {
    "bert": "BertForSequenceClassification",
    "roberta": "RobertaForSequenceClassification",
    "distilbert": "DistilBertForSequenceClassification",
}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


# ----------------------------------------------------------------------------- the source


@dataclass
class HFSource:
    """A local model: its transformers config, where its weights are (None: build from the
    config) and its own tokenizer (None: train one)."""

    path: Path
    config: Any  # a transformers PretrainedConfig
    weights: Path | None
    tokenizer: WordPieceTokenizer | None

    @property
    def classifier(self) -> str:
        return CLASSIFIERS[self.config.model_type]


def load_source(path: Path) -> HFSource:
    """Read a `save_pretrained` directory or a config JSON file (nothing is downloaded)."""
    import transformers

    path = Path(path)
    if not path.exists():
        raise DataError(f"--hf-model {path}: no such directory or config file (attndeploy "
                        "never downloads from the Hugging Face Hub; save the model locally)")
    config_file = path / "config.json" if path.is_dir() else path
    if not config_file.is_file():
        raise DataError(f"{path} holds no config.json")
    try:
        raw = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{config_file} is not valid JSON: {exc}") from exc
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type not in CLASSIFIERS:
        raise ConfigError(f"{config_file}: model_type {model_type!r} is not one attndeploy "
                          f"fine-tunes; supported: {', '.join(CLASSIFIERS)}")
    config_class = getattr(transformers, CLASSIFIERS[model_type]).config_class
    try:
        config = config_class.from_dict(safe_config_dict(raw))  # no Hub kernels
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{config_file}: {exc}") from exc
    weights, tokenizer = None, None
    if path.is_dir():
        if any((path / name).is_file() for name in WEIGHT_FILES):
            weights = path
        elif any((path / name).is_file() for name in PICKLE_FILES):
            raise CheckpointError(f"{path} keeps its weights in a pickle file; attndeploy never "
                                  "unpickles: save the model with safe_serialization (the "
                                  "transformers default) to get model.safetensors")
        tokenizer = WordPieceTokenizer.from_directory(path)
    return HFSource(path, config, weights, tokenizer)


# ----------------------------------------------------------------------------- data


@dataclass
class HFTrainingData:
    train_set: TextDataset
    eval_set: TextDataset
    tokenizer: WordPieceTokenizer
    label_names: tuple[str, ...]
    source: dict[str, Any]


def _texts(
    *, task: str | None, data_file: Path | None, seed: int, n_train: int, n_eval: int,
    eval_fraction: float, max_words: int,
) -> tuple[list[str], list[int], list[str], list[int], tuple[str, ...], dict[str, Any]]:
    """(train texts, labels, held-out texts, labels, label names, where they came from)."""
    if data_file is not None:
        texts, labels = read_jsonl(Path(data_file))
        names = tuple(sorted(set(labels)))
        index = {name: i for i, name in enumerate(names)}
        order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
        n_held = max(1, round(len(texts) * eval_fraction))
        if n_held >= len(texts):
            raise DataError(f"{data_file}: {len(texts)} examples leave none to train on with "
                            f"eval_fraction {eval_fraction}")
        held, kept = order[:n_held], order[n_held:]
        source = {"data_file": str(data_file), "eval_fraction": eval_fraction, "seed": seed}
        return ([texts[i] for i in kept], [index[labels[i]] for i in kept],
                [texts[i] for i in held], [index[labels[i]] for i in held], names, source)
    spec = get_task(task or "sparse_evidence")
    if spec.head != "classification":
        raise DataError(f"task {spec.name!r} tags tokens; --hf-model fine-tunes sequence "
                        "classifiers (a --data file or a classification task)")
    train = spec.sample(n_train, seed=seed, max_seq=max_words)
    held = spec.sample(n_eval, seed=seed + 10_000, max_seq=max_words)
    source = {"task": spec.name, "seed": seed, "n_train": n_train, "n_eval": n_eval,
              "rendered_as": "text"}
    return ([" ".join(w) for w, _ in train], [int(y) for _, y in train],
            [" ".join(w) for w, _ in held], [int(y) for _, y in held], spec.label_names, source)


def _dataset(tokenizer: WordPieceTokenizer, texts: list[str], labels: list[int],
             names: tuple[str, ...], max_seq: int, what: str) -> TextDataset:
    try:
        ids, mask = tokenizer.encode_batch(texts, max_seq=max_seq)
    except DataError as exc:
        raise DataError(f"{what}: {exc}") from None
    return TextDataset(torch.from_numpy(ids), torch.from_numpy(mask),
                       torch.tensor(labels, dtype=torch.long), names, "classification")


def load_hf_training_data(
    source: HFSource, *, task: str | None = None, data_file: Path | None = None, seed: int = 0,
    n_train: int = 4000, n_eval: int = 1000, eval_fraction: float = 0.2, max_seq: int = 128,
) -> HFTrainingData:
    """Texts and labels encoded with the source's tokenizer, or with one trained on them."""
    train_texts, train_labels, held_texts, held_labels, names, origin = _texts(
        task=task, data_file=data_file, seed=seed, n_train=n_train, n_eval=n_eval,
        eval_fraction=eval_fraction, max_words=max_seq - 2,  # [CLS] and [SEP]
    )
    tokenizer = source.tokenizer
    if tokenizer is None:
        limit = source.config.vocab_size if source.weights is not None else DEFAULT_VOCAB_SIZE
        tokenizer = WordPieceTokenizer.train(train_texts, vocab_size=limit)
        origin["tokenizer"] = "wordpiece trained on the training texts"
    else:
        origin["tokenizer"] = f"wordpiece from {source.path}"
    train_set = _dataset(tokenizer, train_texts, train_labels, names, max_seq, "training data")
    eval_set = _dataset(tokenizer, held_texts, held_labels, names, max_seq, "held-out data")
    return HFTrainingData(train_set, eval_set, tokenizer, names, origin)


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


def _learning_rate_factor(step: int, config: TrainConfig) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to 0 at `steps`."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def fine_tune(
    model: HFClassifier, train_set: TextDataset, eval_set: TextDataset, config: TrainConfig, *,
    density_weight: float = 0.0, progress: bool = True,
) -> HFTrainResult:
    """Train `model` in place; returns it in eval mode with held-out metrics."""
    torch.manual_seed(config.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, config))
    generator = torch.Generator().manual_seed(config.seed)
    history: list[dict[str, float]] = []
    started, step = time.perf_counter(), 0
    bar = Progress(
        TextColumn(f"[bold]fine-tune {model.config.architecture} / {model.config.variant}"),
        BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("{task.fields[status]}"), TimeElapsedColumn(), disable=not progress,
    )

    def out_of_time() -> bool:
        return bool(config.max_seconds) and time.perf_counter() - started >= config.max_seconds

    with bar:
        task = bar.add_task("train", total=config.steps, status="")
        while step < config.steps and not out_of_time():
            for input_ids, attention_mask, labels in train_set.batches(
                config.batch_size, shuffle=True, generator=generator
            ):
                out = model(input_ids, attention_mask, details=True)
                loss = task_loss(out["logits"], labels)
                total = loss
                if "density_penalty" in out:
                    total = loss + density_weight * out["density_penalty"]
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                step += 1
                record = {"step": step, "loss": loss.item()}
                if "density_penalty" in out:
                    record["soft_density"] = out["density_penalty"].item()
                history.append(record)
                bar.update(task, advance=1, status=f"loss {record['loss']:.3f}")
                if step >= config.steps or out_of_time():
                    break
    seconds = time.perf_counter() - started
    model.eval()
    metrics = evaluate(model, eval_set)
    summary = {
        "config": asdict(config), "steps_done": step, "seconds": round(seconds, 3),
        "parameters": count_parameters(model),
        "final_loss": history[-1]["loss"] if history else None,
    }
    return HFTrainResult(model, metrics, summary, history)


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
    eval_fraction: float = 0.2,
    force: bool = False,
    progress: bool = True,
) -> HFTrainResult:
    """Load, convert, fine-tune, evaluate and save: the library side of
    `attndeploy train --hf-model`. `options` are fields of the variant's config."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:  # refuse before spending the training time
        raise CheckpointError(f"{out_dir} already exists; pass --force to replace it")
    if task is not None and data_file is not None:
        raise ConfigError("give either --task or --data, not both")
    train_config = train_config or TrainConfig()
    options = dict(options or {})
    sub = variant_config(variant, options)
    source = load_source(Path(hf_model))
    data = load_hf_training_data(
        source, task=task, data_file=data_file, seed=train_config.seed, n_train=n_train,
        n_eval=n_eval, eval_fraction=eval_fraction, max_seq=max_seq,
    )
    model = build_classifier(source, data, variant, options, max_seq=max_seq,
                             seed=train_config.seed)
    density_weight = float(getattr(sub, "density_weight", 0.0)) if model.is_gated else 0.0
    result = fine_tune(model, data.train_set, data.eval_set, train_config,
                       density_weight=density_weight, progress=progress)
    origin = dict(data.source, hf_model=str(source.path),
                  pretrained=source.weights is not None)
    save_hf_checkpoint(
        result.model, out_dir, label_names=data.label_names, tokenizer=data.tokenizer,
        data=origin, training=result.summary, metrics=result.metrics, force=force,
    )
    return result
