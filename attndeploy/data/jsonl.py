"""Labelled texts from JSON Lines files: one object per line, whose keys its model family's
training part declares (`JSONL_KEYS`; text-classification: `{"text": ..., "label": ...}`) and
reads (`read_example`). Unless a family is named, the first object's keys choose it.

Blank lines are skipped. Labels may be strings or integers (integers become strings, so `1` and
`"1"` are the same label). Every problem is a DataError that names the file and, where there is
one, the line. Files are read by the one reader of text files (`attndeploy.runtime.lines`): a
line longer than `MAX_JSONL_LINE_BYTES` (room for any text predict takes, escaped, and its
label) is refused without being read whole. Texts longer than `max_seq` tokens are refused unless
`truncate=True` is asked for: cutting a text silently could cut away the evidence its label rests
on.

A family's training part may read other files too: a file whose suffix is in its `FILE_SUFFIXES`
is read whole by its `read_file(path)` (token-classification's CoNLL column files), and its
`tokenizer_class(records, path)` may choose the splitting rule (characters for a
character-level set) that the tokenizer, and so every later `predict`, applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from attndeploy.data.dataset import TextDataset, split_indices
from attndeploy.data.tokenizer import WordTokenizer, pad_batch
from attndeploy.errors import DataError
from attndeploy.families.registry import FamilySpec, family_spec, family_specs
from attndeploy.jsonread import parse_json
from attndeploy.models.families import training_part


def text_of(obj: dict[str, Any], where: str) -> str:
    """The "text" of a JSONL object: a string of at least one token (every family's lines hold
    one); DataError naming `where` (file:line) otherwise."""
    text = obj["text"]
    if not isinstance(text, str):
        raise DataError(f"{where}: 'text' must be a string; got {type(text).__name__}")
    if not WordTokenizer.tokenize(text):
        raise DataError(f"{where}: empty text; every example needs at least one token")
    return text


def jsonl_families() -> list[tuple[FamilySpec, ModuleType]]:
    """(spec, training part) of every family that reads JSONL files (its `JSONL_KEYS`), in
    family order."""
    found = []
    for spec in family_specs():
        part = training_part(spec)
        if getattr(part, "JSONL_KEYS", ()):
            found.append((spec, part))
    return found


def family_of_record(obj: Any) -> tuple[FamilySpec, ModuleType]:
    """The family a JSONL file's first object belongs to: the first (in family order) whose
    `JSONL_KEYS` it holds; when none does, the first family that reads JSONL, whose reader then
    says which key is missing."""
    families = jsonl_families()
    if not families:
        raise DataError("no model family reads JSONL files")
    if isinstance(obj, dict):
        for spec, part in families:
            if all(key in obj for key in part.JSONL_KEYS):
                return spec, part
    return families[0]


def _family_named(family: FamilySpec | str | None) -> tuple[FamilySpec, ModuleType] | None:
    if family is None:
        return None
    spec = family_spec(family) if isinstance(family, str) else family
    part = training_part(spec)
    if not getattr(part, "JSONL_KEYS", ()):
        raise DataError(f"the {spec.name} family reads no JSONL files; families that do: "
                        f"{', '.join(s.name for s, _ in jsonl_families())}")
    return spec, part


def _file_family(path: Path, chosen: tuple[FamilySpec, ModuleType] | None
                 ) -> tuple[FamilySpec, ModuleType] | None:
    """The family that reads `path` by its suffix (its part's `FILE_SUFFIXES`), or None: JSONL.
    Given a family, only its own suffixes count."""
    suffix = path.suffix.lower()
    candidates = [chosen] if chosen is not None else jsonl_families()
    for spec, part in candidates:
        if suffix in getattr(part, "FILE_SUFFIXES", ()):
            return spec, part
    return None


def _tokenizer_class(read: JsonlRecords, path: Path) -> type[WordTokenizer]:
    """The family's splitting rule for this file (`tokenizer_class`), else words."""
    choose = getattr(read.part, "tokenizer_class", None)
    return WordTokenizer if choose is None else choose(read.records, path)


@dataclass(frozen=True)
class JsonlRecords:
    """A JSONL file's examples as (line number, text, target) and the family that read them
    (chosen by the first object's keys unless given)."""

    family: FamilySpec
    part: ModuleType = field(repr=False)
    records: list[tuple[int, str, Any]]


def _read_records(path: Path, family: FamilySpec | str | None = None) -> JsonlRecords:
    """Every non-blank line's example, read by its family's `read_example`; every malformed line
    fails, naming it."""
    from attndeploy.runtime import lines as text_lines

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    chosen = _family_named(family)
    by_suffix = _file_family(path, chosen)
    if by_suffix is not None:  # not JSONL: the family reads the whole file
        return JsonlRecords(by_suffix[0], by_suffix[1], by_suffix[1].read_file(path))
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
        if chosen is None:
            chosen = family_of_record(obj)
        if not isinstance(obj, dict):
            shape = ", ".join(f'"{key}": ...' for key in chosen[1].JSONL_KEYS)
            raise DataError(
                f"{where}: expected an object {{{shape}}}; got {type(obj).__name__}"
            )
        text, target = chosen[1].read_example(obj, where)
        records.append((lineno, text, target))
    if not records:
        raise DataError(f"{path}: no examples (the file is empty or blank)")
    return JsonlRecords(chosen[0], chosen[1], records)


def read_jsonl(path: Path, family: FamilySpec | str | None = None
               ) -> tuple[list[str], list[Any]]:
    """(texts, targets) of a JSONL file, in file order (a classification file's targets are
    label names, and it must hold >= 2 distinct ones: its family's `label_names_of`)."""
    return read_jsonl_family(path, family)[1]


def read_jsonl_family(path: Path, family: FamilySpec | str | None = None
                      ) -> tuple[str, tuple[list[str], list[Any]]]:
    """(the head of the family that read it, `read_jsonl(path, family)`)."""
    read = _read_records(path, family)
    targets = [target for _, _, target in read.records]
    read.part.label_names_of(targets, Path(path))
    return read.family.head, ([text for _, text, _ in read.records], targets)


def load_jsonl(
    path: Path,
    *,
    tokenizer: WordTokenizer | None = None,
    label_names: tuple[str, ...] | None = None,
    max_seq: int = 128,
    truncate: bool = False,
    family: FamilySpec | str | None = None,
) -> tuple[TextDataset, WordTokenizer]:
    """A TextDataset from a JSONL file, and the tokenizer that encoded it.

    The file's family is `family` (a spec or name), else the one whose `JSONL_KEYS` its first
    object holds (text-classification for `{"text", "label"}`).
    Without `tokenizer`, one is built from the file's texts (`WordTokenizer.build` defaults).
    Without `label_names`, they are the family's from the file (classification: its distinct
    labels, sorted, at least 2); with them (e.g. from a checkpoint, to encode a test file), a
    label outside them fails naming its line, and a file may then hold a single label. A text
    longer than `max_seq` tokens fails naming its line, or keeps its first `max_seq` tokens when
    `truncate` is True.
    """
    path = Path(path)
    if max_seq < 1:
        raise DataError(f"max_seq must be at least 1; got {max_seq}")
    read = _read_records(path, family)
    if label_names is None:
        label_names = read.part.label_names_of([target for _, _, target in read.records], path)
    else:
        label_names = tuple(str(name) for name in label_names)
        read.part.check_label_names(label_names)
    if tokenizer is None:
        tokenizer = _tokenizer_class(read, path).build(text for _, text, _ in read.records)
    dataset = _encode(path, read, read.records, tokenizer, label_names, max_seq=max_seq,
                      truncate=truncate)
    return dataset, tokenizer


def _encode(path: Path, read: JsonlRecords, records: list[tuple[int, str, Any]],
            tokenizer: WordTokenizer, label_names: tuple[str, ...], *, max_seq: int,
            truncate: bool) -> TextDataset:
    encode_label = read.part.label_encoder(label_names)
    sequences, targets = [], []
    for lineno, text, target in records:
        value = encode_label(target, f"{path}:{lineno}")
        ids = tokenizer.encode(text)
        if len(ids) > max_seq:
            if not truncate:
                raise DataError(
                    f"{path}:{lineno}: text has {len(ids)} tokens, more than max_seq={max_seq}; "
                    "shorten it, raise max_seq, or truncate"
                )
            ids = ids[:max_seq]
            if isinstance(value, list):  # one target per token (a tagger's): cut alike
                value = value[:max_seq]
        sequences.append(ids)
        targets.append(value)
    input_ids, attention_mask = pad_batch(sequences)  # [N, T] each
    labels = read.part.labels_tensor(targets, input_ids.shape[1])  # the family's: [N] (or [N, T])
    return TextDataset(input_ids, attention_mask, labels, label_names, read.family.head)


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
    family: FamilySpec | None = None  # the family that read the file


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
    family: FamilySpec | str | None = None,
) -> JsonlSplit:
    """Read a JSONL file and split it: `eval_fraction` held out (the same examples as
    `load_jsonl(path)[0].split(eval_fraction, seed=seed)` holds out), then `val_fraction` of the
    rest kept apart for model selection (seed + 1). The vocabulary is built from the training part
    alone (`min_freq`, `max_vocab` as in `WordTokenizer.build`); labels are all the file's labels.
    The family is `family`, else the one the first object's keys name (`load_jsonl`).
    """
    path = Path(path)
    if max_seq < 1:
        raise DataError(f"max_seq must be at least 1; got {max_seq}")
    read = _read_records(path, family)
    records = read.records
    label_names = read.part.label_names_of([target for _, _, target in records], path)
    kept, held = split_indices(len(records), eval_fraction, seed=seed)
    parts = {"train": kept.tolist(), "held_out": held.tolist()}
    if val_fraction:
        train, val = split_indices(len(kept), val_fraction, seed=seed + 1)
        parts["train"], parts["validation"] = kept[train].tolist(), kept[val].tolist()
    chosen = {name: [records[i] for i in rows] for name, rows in parts.items()}
    tokenizer = _tokenizer_class(read, path).build((text for _, text, _ in chosen["train"]),
                                                   min_freq=min_freq, max_vocab=max_vocab)
    encoded = {name: _encode(path, read, rows, tokenizer, label_names, max_seq=max_seq,
                             truncate=truncate) for name, rows in chosen.items()}
    tokens = {name: [tokenizer.tokenize(text) for _, text, _ in rows]
              for name, rows in chosen.items()}
    return JsonlSplit(encoded["train"], encoded.get("validation"), encoded["held_out"],
                      tokenizer, tokens, read.family)
