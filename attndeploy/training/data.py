"""What training reads: a built-in task or a JSONL file split into training, validation and
held-out sets, and the family's baseline fitted on the same split."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attndeploy.training.config import EVAL_FRACTION, N_EVAL, N_TRAIN


@dataclass
class TrainingData:
    train_set: Any
    eval_set: Any
    tokenizer: Any
    label_names: tuple[str, ...]
    head: str
    source: dict[str, Any]
    val_set: Any = None  # for model selection; None: select on eval_set
    # Token lists for the bag-of-words baseline: "fit" (train + validation), "held_out". None for
    # a built-in task: decoded from the ids (its vocabulary is closed, nothing is lost).
    tokens: dict[str, list[list[str]]] | None = field(default=None, repr=False)


def load_training_data(
    *,
    task: str | None,
    data_file: Any = None,
    seed: int = 0,
    n_train: int = N_TRAIN,
    n_eval: int = N_EVAL,
    eval_fraction: float = EVAL_FRACTION,
    max_seq: int = 128,
    val_fraction: float = 0.0,
    n_val: int = 0,
    truncate: bool = False,
    min_freq: int = 1,
    family: Any = None,
) -> TrainingData:
    """A built-in task (train, validation and held-out sets from different seeds) or a JSONL file
    (split: `eval_fraction` held out, then `val_fraction` of the rest for validation; the
    vocabulary comes from the training part alone). A file is read by `family` (a FamilySpec or
    its name), else by the family whose `JSONL_KEYS` its first object holds."""
    from pathlib import Path

    from attndeploy.data import get_task
    from attndeploy.data.held_out import TASK_HELD_OUT_SEED
    from attndeploy.data.jsonl import load_jsonl_split
    from attndeploy.fsutil import file_sha256

    if data_file is not None:
        split = load_jsonl_split(Path(data_file), eval_fraction=eval_fraction, seed=seed,
                                 val_fraction=val_fraction, max_seq=max_seq, truncate=truncate,
                                 min_freq=min_freq, family=family)
        source = {"data_file": str(data_file), "data_sha256": file_sha256(Path(data_file)),
                  "eval_fraction": eval_fraction, "seed": seed,
                  "val_fraction": val_fraction, "min_freq": min_freq,
                  "train_examples": len(split.train), "held_out_examples": len(split.held_out)}
        if split.validation is not None:
            source["validation_examples"] = len(split.validation)
        tokens = {"fit": split.tokens["train"] + split.tokens.get("validation", []),
                  "held_out": split.tokens["held_out"]}
        return TrainingData(split.train, split.held_out, split.tokenizer,
                            split.held_out.label_names, split.held_out.head, source,
                            val_set=split.validation, tokens=tokens)
    spec = get_task(task or "sparse_evidence")
    if family is not None:
        _check_task_family(spec, family)
    train_set, tokenizer = spec.generate(n_train, seed=seed, max_seq=max_seq)
    eval_set, _ = spec.generate(n_eval, seed=seed + TASK_HELD_OUT_SEED, max_seq=max_seq)
    val_set = spec.generate(n_val, seed=seed + 20_000, max_seq=max_seq)[0] if n_val else None
    source = {"task": spec.name, "seed": seed, "n_train": n_train, "n_eval": n_eval}
    if n_val:
        source["n_val"] = n_val
    return TrainingData(train_set, eval_set, tokenizer, spec.label_names, spec.head, source,
                        val_set=val_set)


def _check_task_family(task: Any, family: Any) -> None:
    """ConfigError when the built-in data set `task` (a TaskSpec) is not of `family` (a
    FamilySpec or its name)."""
    from attndeploy.errors import ConfigError
    from attndeploy.families.registry import family_for_head, family_spec

    wanted = family_spec(family) if isinstance(family, str) else family
    if task.head != wanted.head:
        raise ConfigError(f"data set {task.name!r} trains a {family_for_head(task.head).name} "
                          f"model, not {wanted.name}")


def _decoded(dataset: Any, tokenizer: Any) -> list[list[str]]:
    lengths = dataset.attention_mask.sum(-1).tolist()
    return [tokenizer.decode(row[:n]) for row, n in zip(dataset.input_ids.tolist(), lengths,
                                                         strict=True)]


def fit_baseline(data: TrainingData) -> dict[str, Any]:
    """The bag-of-words naive Bayes baseline on `data`'s split (fitted on the training and
    validation examples, scored on the held-out ones): the family's (its training part's
    `fit_baseline`); {} for a family without one (token tagging)."""
    from attndeploy.training.families import training_part

    fit_sets = [data.train_set] + ([data.val_set] if data.val_set is not None else [])
    if data.tokens is not None:
        fit_docs, eval_docs = data.tokens["fit"], data.tokens["held_out"]
    else:
        fit_docs = [doc for part in fit_sets for doc in _decoded(part, data.tokenizer)]
        eval_docs = _decoded(data.eval_set, data.tokenizer)
    return training_part(data.head).fit_baseline(
        fit_docs, [part.labels for part in fit_sets], eval_docs, data.eval_set.labels,
        data.label_names)
