"""The held-out examples of a checkpoint: the texts `train` evaluated it on and never trained on.

`quantize --data`, and any check of an exported model against its checkpoint, want texts the
model did not learn from; training holds them out but keeps no copy. A checkpoint records where
they came from (its `data` entry), and `held_out_of(record)` makes them again:
- a JSONL file: `eval_fraction` of its examples at `seed` (`split_indices`, as `train --data`
  and `train --hf-model` split), checked against the file's SHA-256 where the checkpoint
  recorded one (checkpoints since `data_sha256` was added) and against the recorded count;
- a built-in task: its `n_eval` examples at `seed + 10_000`, as text (a tagger's with tags).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attndeploy.errors import DataError

TASK_HELD_OUT_SEED = 10_000  # the held-out examples of a task are drawn at seed + this


@dataclass(frozen=True)
class HeldOut:
    """The held-out examples as (text, target: a label name for text classification), in the
    order training evaluated them."""

    examples: list[tuple[str, Any]]
    origin: str  # what they were made from, for people
    head: str = ""  # the family that reads them (its `jsonl_line` writes them); "": {text, label}

    def to_jsonl(self) -> str:
        if self.head:
            from attndeploy.models.families import training_part

            line = training_part(self.head).jsonl_line
        else:
            def line(text: str, label: Any) -> dict[str, Any]:
                return {"text": text, "label": label}
        return "".join(json.dumps(line(text, target)) + "\n" for text, target in self.examples)


def held_out_of(record: dict[str, Any], *, max_seq: int, hf: bool,
                data_file: Path | None = None) -> HeldOut:
    """The held-out examples of a checkpoint whose `data` entry is `record`.

    `max_seq`: the model's; `hf`: trained with `--hf-model` (a task's texts are then drawn two
    words shorter, for [CLS] and [SEP]). `data_file` replaces the recorded path (a file that
    moved); it must be the same file."""
    if "data_file" in record:
        return _from_file(record, Path(data_file or record["data_file"]), given=data_file)
    if "task" in record:
        return _from_task(record, max_words=max_seq - 2 if hf else max_seq)
    raise DataError("the checkpoint records neither a data file nor a task: it was not "
                    "trained by attndeploy train, so its held-out examples are unknown")


def _from_file(record: dict[str, Any], path: Path, *, given: Path | None) -> HeldOut:
    from attndeploy.data.dataset import split_indices
    from attndeploy.data.jsonl import read_jsonl_family
    from attndeploy.fsutil import file_sha256

    if not path.is_file():
        raise DataError(f"{path}: no such data file (the checkpoint trained on it"
                        f"{'' if given else ' from the directory train ran in'}); give "
                        "--data PATH where the file is now")
    recorded = record.get("data_sha256")
    if recorded is not None and file_sha256(path) != recorded:
        raise DataError(f"{path} is not the file the checkpoint trained on: its SHA-256 differs "
                        "from the recorded one, so its split would hold other examples")
    head, (texts, labels) = read_jsonl_family(path)
    share = float(record["eval_fraction"])
    rows = split_indices(len(texts), share, seed=int(record["seed"]))[1].tolist()
    expected = record.get("held_out_examples")
    if expected is not None and len(rows) != expected:
        raise DataError(f"{path} splits into {len(rows)} held-out examples where the "
                        f"checkpoint held out {expected}: it is not the file it trained on")
    return HeldOut([(texts[i], labels[i]) for i in rows],
                   f"{path} ({share:.0%} held out at split seed {record['seed']})", head)


def _from_task(record: dict[str, Any], *, max_words: int) -> HeldOut:
    from attndeploy.data.synthetic import get_task
    from attndeploy.models.families import training_part

    spec = get_task(record["task"])
    if not getattr(training_part(spec.head), "JSONL_KEYS", ()):
        raise DataError(f"task {spec.name!r}: its family reads no JSONL file, so its held-out "
                        "examples cannot be written as one")
    seed = int(record["seed"]) + TASK_HELD_OUT_SEED
    examples = spec.sample(int(record["n_eval"]), seed=seed, max_seq=max_words)

    def named(label: Any) -> Any:  # a class index, or a tagger's one index per token
        return (spec.label_names[label] if isinstance(label, int)
                else [spec.label_names[index] for index in label])
    return HeldOut([(" ".join(words), named(label)) for words, label in examples],
                   f"task {spec.name} ({record['n_eval']} examples at seed {seed})", spec.head)
