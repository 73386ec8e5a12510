"""fp32 against int8: what quantizing changed, measured the way a user would judge it.

- On a grid of shapes (`QuantizeOptions.grid`, random ids, later rows right-padded): the largest
  |logit change| and how often the argmax label stays (GA-Net: how many hard gates flip).
- On labelled texts (a JSONL file, e.g. the held-out split): the share of texts whose label stays,
  the held-out accuracy of both models, and for GA-Net how many hard gates flip.
Both models run in onnxruntime through `InferenceModel` (the runtime `predict` and the served
models use), so the numbers are what serving will see.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import ConfigError, DataError
from attndeploy.interface import ATTENTION_MASK, INPUT_IDS
from attndeploy.quantize.options import DEFAULT_GRID
from attndeploy.runtime.model import InferenceModel


def parse_grid(text: str | None, max_seq: int) -> list[tuple[int, int]]:
    """"1x8,4x32" -> [(1, 8), (4, 32)]; seq above the model's max_seq is refused. None: the
    default grid, each seq capped at max_seq."""
    if text is None:
        capped = {(batch, min(seq, max_seq)) for batch, seq in parse_grid(DEFAULT_GRID, 10**9)}
        return sorted(capped)
    shapes = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        try:
            batch, seq = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise ConfigError(f"grid shape {item!r} is not BATCHxSEQ (e.g. 8x128)") from None
        if batch < 1 or not 1 <= seq <= max_seq:
            raise ConfigError(f"grid shape {item!r}: batch must be >= 1 and seq in [1, "
                              f"{max_seq}] (the model's max_seq)")
        shapes.append((batch, seq))
    if not shapes:
        raise ConfigError("the grid holds no shape")
    return shapes


def grid_feeds(shapes: list[tuple[int, int]], vocab_size: int, seed: int
               ) -> list[dict[str, np.ndarray]]:
    """Random ids per shape; row r keeps seq - r * seq // (2 * batch) real tokens (the rest
    right-padded), so padded rows are checked too."""
    rng = np.random.default_rng(seed)
    feeds = []
    for batch, seq in shapes:
        ids = rng.integers(1, vocab_size, size=(batch, seq), dtype=np.int64)  # [B, T]
        lengths = np.maximum(1, seq - np.arange(batch) * seq // (2 * batch))  # [B]
        mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)  # [B, T]
        feeds.append({INPUT_IDS: ids * mask, ATTENTION_MASK: mask})
    return feeds


@dataclass
class GridCheck:
    max_logit_change: float
    label_agreement: float
    gate_flips: int | None  # GA-Net: hard gates that differ, over real tokens
    shapes: list[tuple[int, int]]


def compare_on_grid(fp32: InferenceModel, int8: InferenceModel,
                    feeds: list[dict[str, np.ndarray]]) -> GridCheck:
    largest, same, rows, flips = 0.0, 0, 0, 0
    for feed in feeds:
        a = fp32.run(feed[INPUT_IDS], feed[ATTENTION_MASK])
        b = int8.run(feed[INPUT_IDS], feed[ATTENTION_MASK])
        real = feed[ATTENTION_MASK].astype(bool)  # [B, T]
        logits_a, logits_b = a["logits"], b["logits"]  # [B, C] or [B, T, C]
        if logits_a.ndim == 3:
            logits_a, logits_b = logits_a[real], logits_b[real]  # [N, C]
        largest = max(largest, float(np.abs(logits_a - logits_b).max()))
        same += int((logits_a.argmax(-1) == logits_b.argmax(-1)).sum())
        rows += logits_a.shape[0]
        if "gates" in a:
            flips += int((a["gates"] != b["gates"])[real].sum())
    return GridCheck(largest, same / rows, flips if fp32.gated else None,
                     [(f[INPUT_IDS].shape[0], f[INPUT_IDS].shape[1]) for f in feeds])


@dataclass
class DataCheck:
    texts: int
    label_agreement: float  # share of texts whose predicted label is the same
    fp32_accuracy: float
    int8_accuracy: float
    file: str
    gate_flips: int | None = None  # GA-Net: hard gates that differ, over the texts' tokens
    gates: int | None = None  # GA-Net: the texts' tokens (gates compared)

    @property
    def accuracy_drop(self) -> float:
        return self.fp32_accuracy - self.int8_accuracy


def read_labelled(path: Path, labels: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """Texts and label indices of a JSONL file of {"text", "label"}; a label the model does not
    have fails naming it."""
    from attndeploy.data import read_jsonl

    texts, names = read_jsonl(Path(path))
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted(set(names) - set(index))
    if unknown:
        raise DataError(f"{path}: label(s) {', '.join(map(repr, unknown[:5]))} are not the "
                        f"model's ({', '.join(labels)})")
    return texts, [index[name] for name in names]


def compare_on_texts(fp32: InferenceModel, int8: InferenceModel, texts: list[str],
                     gold: list[int], file: str) -> DataCheck:
    if fp32.head != "classification":
        raise DataError("--data checks labels per text: a tagging model's quantization is "
                        "checked on the shape grid only; leave --data out")
    index = {name: i for i, name in enumerate(fp32.labels)}
    before = fp32.predict(texts, truncate=True)
    after = int8.predict(texts, truncate=True)
    a = [index[p.label] for p in before]
    b = [index[p.label] for p in after]
    n = len(texts)
    flips = gates = None
    if fp32.gated:  # gates [T] per text, over its real tokens
        flips = sum(int((p.gates != q.gates).sum()) for p, q in zip(before, after, strict=True))
        gates = sum(len(p.gates) for p in before)
    return DataCheck(
        texts=n, label_agreement=sum(x == y for x, y in zip(a, b, strict=True)) / n,
        fp32_accuracy=sum(x == y for x, y in zip(a, gold, strict=True)) / n,
        int8_accuracy=sum(x == y for x, y in zip(b, gold, strict=True)) / n, file=file,
        gate_flips=flips, gates=gates,
    )


def to_dict(check: GridCheck | DataCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    record = asdict(check)
    if isinstance(check, DataCheck):
        record["accuracy_drop"] = check.accuracy_drop
    return record
