"""Classification data from JSON Lines files: one `{"text": ..., "label": ...}` object per line.

Blank lines are skipped. Labels may be strings or integers (integers become strings, so `1` and
`"1"` are the same label). Every problem is a DataError that names the file and, where there is
one, the line. Files are read by the one reader of text files (`attndeploy.runtime.lines`): a
line longer than `MAX_JSONL_LINE_BYTES` (room for any text predict takes, escaped, and its
label) is refused without being read whole. Texts longer than `max_seq` tokens are refused unless
`truncate=True` is asked for: cutting a text silently could cut away the evidence its label rests
on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attndeploy.data.dataset import TextDataset, split_indices
from attndeploy.data.tokenizer import WordTokenizer, pad_batch
from attndeploy.errors import DataError
from attndeploy.jsonread import parse_json


def _read_records(path: Path) -> list[tuple[int, str, str]]:
    """(line number, text, label) per non-blank line; every malformed line fails."""
    from attndeploy.runtime import lines as text_lines

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    records = []
    reader = text_lines.LineReader(path, limit=text_lines.MAX_JSONL_LINE_BYTES,
                                   unit="JSONL line (a text and its label)")
    with reader:
        lines = list(reader)  # a line over the limit is refused before it is read whole
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        obj = parse_json(line, where, error=DataError, invalid=lambda err, where=where: (
            f"{where}: invalid JSON ({err.msg}, column {err.colno})"))
        if not isinstance(obj, dict):
            raise DataError(
                f'{where}: expected an object {{"text": ..., "label": ...}}; '
                f"got {type(obj).__name__}"
            )
        for key in ("text", "label"):
            if key not in obj:
                raise DataError(f"{where}: missing {key!r}")
        text, label = obj["text"], obj["label"]
        if not isinstance(text, str):
            raise DataError(f"{where}: 'text' must be a string; got {type(text).__name__}")
        if not WordTokenizer.tokenize(text):
            raise DataError(f"{where}: empty text; every example needs at least one token")
        if isinstance(label, bool) or not isinstance(label, str | int):
            raise DataError(
                f"{where}: 'label' must be a string or an integer; got {json.dumps(label)}"
            )
        label = str(label)
        if not label:
            raise DataError(f"{where}: empty label")
        records.append((lineno, text, label))
    if not records:
        raise DataError(f"{path}: no examples (the file is empty or blank)")
    return records


def _require_two_labels(path: Path, labels: list[str]) -> None:
    distinct = sorted(set(labels))
    if len(distinct) < 2:
        raise DataError(
            f"{path}: needs at least 2 distinct labels to train a classifier; "
            f"found only {distinct!r} in {len(labels)} examples"
        )


def read_jsonl(path: Path) -> tuple[list[str], list[str]]:
    """(texts, labels) of a JSONL file, in file order; the file must hold >= 2 distinct labels."""
    records = _read_records(path)
    labels = [label for _, _, label in records]
    _require_two_labels(Path(path), labels)
    return [text for _, text, _ in records], labels


def load_jsonl(
    path: Path,
    *,
    tokenizer: WordTokenizer | None = None,
    label_names: tuple[str, ...] | None = None,
    max_seq: int = 128,
    truncate: bool = False,
) -> tuple[TextDataset, WordTokenizer]:
    """A classification TextDataset from a JSONL file, and the tokenizer that encoded it.

    Without `tokenizer`, one is built from the file's texts (`WordTokenizer.build` defaults).
    Without `label_names`, they are the file's distinct labels, sorted (at least 2); with them
    (e.g. from a checkpoint, to encode a test file), a label outside them fails naming its line,
    and a file may then hold a single label. A text longer than `max_seq` tokens fails naming
    its line, or keeps its first `max_seq` tokens when `truncate` is True.
    """
    path = Path(path)
    if max_seq < 1:
        raise DataError(f"max_seq must be at least 1; got {max_seq}")
    records = _read_records(path)
    if label_names is None:
        labels = [label for _, _, label in records]
        _require_two_labels(path, labels)
        label_names = tuple(sorted(set(labels)))
    else:
        label_names = tuple(str(name) for name in label_names)
        if len(label_names) < 2 or len(set(label_names)) != len(label_names):
            raise DataError(f"label_names must hold at least 2 distinct names; got {label_names!r}")
    if tokenizer is None:
        tokenizer = WordTokenizer.build(text for _, text, _ in records)
    dataset = _encode(path, records, tokenizer, label_names, max_seq=max_seq, truncate=truncate)
    return dataset, tokenizer


def _encode(path: Path, records: list[tuple[int, str, str]], tokenizer: WordTokenizer,
            label_names: tuple[str, ...], *, max_seq: int, truncate: bool) -> TextDataset:
    label_ids = {name: index for index, name in enumerate(label_names)}
    sequences, targets = [], []
    for lineno, text, label in records:
        if label not in label_ids:
            raise DataError(
                f"{path}:{lineno}: label {label!r} is not one of {', '.join(label_names)}"
            )
        ids = tokenizer.encode(text)
        if len(ids) > max_seq:
            if not truncate:
                raise DataError(
                    f"{path}:{lineno}: text has {len(ids)} tokens, more than max_seq={max_seq}; "
                    "shorten it, raise max_seq, or truncate"
                )
            ids = ids[:max_seq]
        sequences.append(ids)
        targets.append(label_ids[label])
    input_ids, attention_mask = pad_batch(sequences)  # [N, T] each
    labels_tensor = torch.tensor(targets, dtype=torch.long)  # [N]
    return TextDataset(input_ids, attention_mask, labels_tensor, label_names, "classification")


@dataclass(frozen=True)
class JsonlSplit:
    """A JSONL file split into training, optional validation and held-out parts.

    `tokenizer` knows only the words of the training part (validation and held-out words it never
    saw encode as `<unk>`, as unseen words will at inference); `tokens` holds each part's texts as
    token lists (`WordTokenizer.tokenize`), for the bag-of-words baseline.
    """

    train: TextDataset
    validation: TextDataset | None
    held_out: TextDataset
    tokenizer: WordTokenizer
    tokens: dict[str, list[list[str]]] = field(repr=False)


def load_jsonl_split(
    path: Path,
    *,
    eval_fraction: float,
    seed: int,
    val_fraction: float = 0.0,
    max_seq: int = 128,
    truncate: bool = False,
    min_freq: int = 1,
    max_vocab: int = 20000,
) -> JsonlSplit:
    """Read a JSONL file and split it: `eval_fraction` held out (the same examples as
    `load_jsonl(path)[0].split(eval_fraction, seed=seed)` holds out), then `val_fraction` of the
    rest kept apart for model selection (seed + 1). The vocabulary is built from the training part
    alone (`min_freq`, `max_vocab` as in `WordTokenizer.build`); labels are all the file's labels.
    """
    path = Path(path)
    if max_seq < 1:
        raise DataError(f"max_seq must be at least 1; got {max_seq}")
    records = _read_records(path)
    labels = [label for _, _, label in records]
    _require_two_labels(path, labels)
    label_names = tuple(sorted(set(labels)))
    kept, held = split_indices(len(records), eval_fraction, seed=seed)
    parts = {"train": kept.tolist(), "held_out": held.tolist()}
    if val_fraction:
        train, val = split_indices(len(kept), val_fraction, seed=seed + 1)
        parts["train"], parts["validation"] = kept[train].tolist(), kept[val].tolist()
    chosen = {name: [records[i] for i in rows] for name, rows in parts.items()}
    tokenizer = WordTokenizer.build((text for _, text, _ in chosen["train"]),
                                    min_freq=min_freq, max_vocab=max_vocab)
    encoded = {name: _encode(path, rows, tokenizer, label_names, max_seq=max_seq,
                             truncate=truncate) for name, rows in chosen.items()}
    tokens = {name: [WordTokenizer.tokenize(text) for _, text, _ in rows]
              for name, rows in chosen.items()}
    return JsonlSplit(encoded["train"], encoded.get("validation"), encoded["held_out"],
                      tokenizer, tokens)
