"""The data side of Hugging Face fine-tuning: the local model source and the training texts.

`load_source(path)` reads a `save_pretrained` directory or a config JSON file (nothing is
downloaded; pickle weights are refused) into an `HFSource`; `load_hf_training_data` tokenizes a
JSONL file or a built-in task with the source's WordPiece tokenizer (or one trained on the
training texts) into the train, validation and held-out sets, split as `attndeploy train --data`
splits; `fit_hf_baseline` scores the bag-of-words baseline on the same split. `hf_train.py`
fine-tunes on the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attndeploy.data import TextDataset, get_task, read_jsonl
from attndeploy.data.dataset import split_indices
from attndeploy.data.held_out import TASK_HELD_OUT_SEED
from attndeploy.errors import CheckpointError, ConfigError, DataError
from attndeploy.families.registry import FamilySpec, family_specs
from attndeploy.fsutil import file_sha256
from attndeploy.integrations.hf_config import (
    check_model,
    check_parameters,
    check_sizes,
    config_from_dict,
)
from attndeploy.integrations.hf_tokenizer import DEFAULT_VOCAB_SIZE, WordPieceTokenizer
from attndeploy.jsonread import read_json_file
from attndeploy.runtime.text import encode_texts
from attndeploy.runtime.tokenizer import WordTokenizer, pad_sequences
from attndeploy.training.baseline import baseline_metrics

# What `train --hf-model` builds on the encoder: a transformers head class of this suffix; the
# family whose spec's `hf_heads` holds it reads the data (text-classification)
TRAINED_HF_HEAD = "ForSequenceClassification"
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


def trained_family() -> FamilySpec:
    """The model family `train --hf-model` fine-tunes: the one whose `hf_heads` holds
    `TRAINED_HF_HEAD`."""
    for spec in family_specs():
        if TRAINED_HF_HEAD in spec.hf_heads:
            return spec
    raise ConfigError(f"no model family converts *{TRAINED_HF_HEAD} models")


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
    raw = read_json_file(config_file, error=DataError)
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type not in CLASSIFIERS:
        raise ConfigError(f"{config_file}: model_type {model_type!r} is not one attndeploy "
                          f"fine-tunes; supported: {', '.join(CLASSIFIERS)}")
    # Bounded before transformers sees it: nothing is built until every check has passed.
    where = f"{config_file}: "
    check_sizes(raw, where)
    config_class = getattr(transformers, CLASSIFIERS[model_type]).config_class
    config = config_from_dict(config_class, raw, where)  # no Hub kernels
    check_model(config, where)
    check_parameters(config, where)  # weights or not: from_pretrained builds the config's sizes
    weights, tokenizer = None, None
    if path.is_dir():
        if any((path / name).is_file() for name in WEIGHT_FILES):
            check_weight_files(path)
            weights = path
        elif any((path / name).is_file() for name in PICKLE_FILES):
            raise CheckpointError(f"{path} keeps its weights in a pickle file; attndeploy never "
                                  "unpickles: save the model with safe_serialization (the "
                                  "transformers default) to get model.safetensors")
        tokenizer = WordPieceTokenizer.from_directory(path)
    return HFSource(path, config, weights, tokenizer)


def holds_weights(path: Path) -> bool:
    """Whether `--hf-model PATH` is a folder with safetensors weights (pretrained), not a
    config alone (random weights)."""
    path = Path(path)
    return path.is_dir() and any((path / name).is_file() for name in WEIGHT_FILES)


def check_weight_files(folder: Path) -> None:
    """Read the header of each safetensors file holding the folder's weights (nothing is
    loaded), so that a corrupt, truncated or oversized one is a CheckpointError naming it here,
    not an error from deep inside transformers' `from_pretrained`. The files are the ones
    transformers reads: `model.safetensors`, else the shards that the index names."""
    from attndeploy.checkpoint import header_tensors

    single, index = (folder / name for name in WEIGHT_FILES)
    if single.is_file():
        files = [single]
    else:
        try:
            weight_map = read_json_file(index, error=CheckpointError)["weight_map"]
            files = sorted({folder / name for name in weight_map.values()})
        except (CheckpointError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{index} is not a safetensors index (a JSON object whose "
                                  f"weight_map names the shards): {exc}") from None
    for file in files:
        header_tensors(file)  # CheckpointError: "<file> is corrupt: ..." or "cannot read <file>"


def check_loaded_weights(model: Any, loading_info: dict[str, Any], folder: Path) -> None:
    """Refuse a pretrained encoder whose weights did not all load (`from_pretrained`'s
    `output_loading_info`): a tensor the folder lacks, or holds at another shape than its
    config.json gives, would start random, and fine-tuning would not start from the pretrained
    function. The classification head (everything outside the base model, and its pooler) is
    new by design: the data's labels set it."""
    prefix = f"{model.base_model_prefix}."

    def encoder(name: str) -> bool:
        return name.startswith(prefix) and not name.startswith(f"{prefix}pooler.")

    missing = sorted(name for name in loading_info["missing_keys"] if encoder(name))
    mismatched = sorted((entry for entry in loading_info["mismatched_keys"]
                         if encoder(entry[0])), key=lambda entry: entry[0])
    if not missing and not mismatched:
        return
    total = sum(encoder(name) for name in model.state_dict())
    shown = [f"{name}: not in the file" for name in missing[:2]] + [
        f"{name}: {list(held)} in the file, {list(wanted)} in config.json"
        for name, held, wanted in mismatched[:2]]
    raise CheckpointError(
        f"the weights in {folder} do not fit its config.json: {len(missing) + len(mismatched)} "
        f"of the encoder's {total} tensors would start random ({'; '.join(shown)}); give the "
        "folder the model was saved in, unedited")


# ----------------------------------------------------------------------------- data


@dataclass
class HFTrainingData:
    train_set: TextDataset
    eval_set: TextDataset
    tokenizer: WordPieceTokenizer
    label_names: tuple[str, ...]
    source: dict[str, Any]
    val_set: TextDataset | None = None  # for model selection; None: select on eval_set
    # The texts' words (lowercased, as `WordTokenizer` splits them) for the bag-of-words
    # baseline: "fit" (training + validation), "held_out"; and the labels of "fit".
    words: dict[str, list[list[str]]] = field(default_factory=dict, repr=False)
    fit_labels: list[int] = field(default_factory=list, repr=False)


Split = tuple[list[str], list[int]]  # texts and label indices


def _texts(
    *, task: str | None, data_file: Path | None, seed: int, n_train: int, n_eval: int,
    n_val: int, eval_fraction: float, val_fraction: float, max_words: int,
) -> tuple[dict[str, Split], tuple[str, ...], dict[str, Any]]:
    """({"train", "held_out"[, "validation"]}: texts and labels, label names, their origin)."""
    family = trained_family()
    if data_file is not None:
        texts, labels = read_jsonl(Path(data_file), family)
        names = tuple(sorted(set(labels)))
        index = {name: i for i, name in enumerate(names)}
        kept, held = (part.tolist() for part in split_indices(len(texts), eval_fraction,
                                                               seed=seed))
        rows = {"train": kept, "held_out": held}
        if val_fraction:  # as attndeploy train --data: a share of the training part, seed + 1
            train, val = split_indices(len(kept), val_fraction, seed=seed + 1)
            rows["train"], rows["validation"] = ([kept[i] for i in train.tolist()],
                                                 [kept[i] for i in val.tolist()])
        source = {"data_file": str(data_file), "data_sha256": file_sha256(Path(data_file)),
                  "eval_fraction": eval_fraction, "seed": seed, "val_fraction": val_fraction}
        return ({part: ([texts[i] for i in chosen], [index[labels[i]] for i in chosen])
                 for part, chosen in rows.items()}, names, source)
    spec = get_task(task or "sparse_evidence")
    if spec.head != family.head:
        raise DataError(f"task {spec.name!r} tags tokens; --hf-model fine-tunes sequence "
                        "classifiers (a --data file or a classification task)")
    counts = {"train": (n_train, seed), "held_out": (n_eval, seed + TASK_HELD_OUT_SEED)}
    if n_val:
        counts["validation"] = (n_val, seed + 20_000)
    parts = {}
    for part, (count, part_seed) in counts.items():
        examples = spec.sample(count, seed=part_seed, max_seq=max_words)
        parts[part] = ([" ".join(words) for words, _ in examples], [int(y) for _, y in examples])
    source = {"task": spec.name, "seed": seed, "n_train": n_train, "n_eval": n_eval,
              "rendered_as": "text", **({"n_val": n_val} if n_val else {})}
    return parts, spec.label_names, source


def _dataset(tokenizer: WordPieceTokenizer, split: Split, names: tuple[str, ...], max_seq: int,
             what: str, truncate: bool = False) -> tuple[TextDataset, int]:
    """The split encoded, and how many of its texts were cut to `max_seq` (with `truncate`;
    without it a longer text is refused, naming it)."""
    texts, labels = split
    try:
        if truncate:  # as `predict --truncate` cuts: [CLS], the first pieces that fit, [SEP]
            encoded = encode_texts(tokenizer, texts, max_seq=max_seq, truncate=True)
            ids, mask = pad_sequences([e.ids for e in encoded])  # int64 [N, T] each
            cut = sum(e.truncated for e in encoded)
        else:
            ids, mask = tokenizer.encode_batch(texts, max_seq=max_seq)  # int64 [N, T] each
            cut = 0
    except DataError as exc:
        raise DataError(f"{what}: {exc}") from None
    return TextDataset(torch.from_numpy(ids), torch.from_numpy(mask),
                       torch.tensor(labels, dtype=torch.long), names, trained_family().head), cut


def load_hf_training_data(
    source: HFSource, *, task: str | None = None, data_file: Path | None = None, seed: int = 0,
    n_train: int = 4000, n_eval: int = 1000, n_val: int = 0, eval_fraction: float = 0.2,
    val_fraction: float = 0.0, max_seq: int = 128, truncate: bool = False,
) -> HFTrainingData:
    """Texts and labels encoded with the source's tokenizer, or with one trained on the
    training texts (never on validation or held-out ones). A text of more than `max_seq`
    pieces is refused, or with `truncate` keeps its first pieces (counted in the source)."""
    parts, names, origin = _texts(
        task=task, data_file=data_file, seed=seed, n_train=n_train, n_eval=n_eval, n_val=n_val,
        eval_fraction=eval_fraction, val_fraction=val_fraction,
        max_words=max_seq - 2,  # [CLS] and [SEP]
    )
    tokenizer = source.tokenizer
    if tokenizer is None:
        limit = source.config.vocab_size if source.weights is not None else DEFAULT_VOCAB_SIZE
        tokenizer = WordPieceTokenizer.train(parts["train"][0], vocab_size=limit)
        origin["tokenizer"] = "wordpiece trained on the training texts"
    else:
        origin["tokenizer"] = f"wordpiece from {source.path}"
    encoded = {part: _dataset(tokenizer, split, names, max_seq, what, truncate)
               for part, what in (("train", "training data"), ("held_out", "held-out data"),
                                  ("validation", "validation data"))
               if (split := parts.get(part))}
    sets = {part: dataset for part, (dataset, _) in encoded.items()}
    origin.update({f"{part}_examples": len(dataset) for part, dataset in sets.items()})
    if truncate:
        origin["truncated_to_max_seq"] = {part: cut for part, (_, cut) in encoded.items()}
    fit = [parts["train"]] + ([parts["validation"]] if "validation" in parts else [])
    words = {"fit": [WordTokenizer.tokenize(t) for texts, _ in fit for t in texts],
             "held_out": [WordTokenizer.tokenize(t) for t in parts["held_out"][0]]}
    return HFTrainingData(sets["train"], sets["held_out"], tokenizer, names, origin,
                          val_set=sets.get("validation"), words=words,
                          fit_labels=[y for _, labels in fit for y in labels])


def fit_hf_baseline(data: HFTrainingData) -> dict[str, Any]:
    """The bag-of-words naive Bayes baseline on the texts' words, fitted on the training and
    validation examples and scored on the held-out ones (as `attndeploy train` does)."""
    return baseline_metrics(data.words["fit"], data.fit_labels, data.words["held_out"],
                            data.eval_set.labels.tolist(), len(data.label_names))
