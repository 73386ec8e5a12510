"""fp32 against int8: what quantizing changed, measured the way a user would judge it.

What "the same answer" means is the model family's (`attndeploy.validate.families`, its checks
part): which outputs are per token (compared on real tokens only), what decision is compared
(a text's label, each real token's tag; none for a family that takes no decision) and how the
answers on labelled texts are scored (accuracy).

- On a grid of shapes (`QuantizeOptions.grid`, random ids, later rows right-padded): the largest
  change of the decision output (|logit change|) and how often the decision stays (GA-Net and
  any gated variant: how many hard gates flip).
- On texts (a JSONL file, e.g. the held-out split, read by the family): the share of decisions
  that stay, the score of both models where the family scores its texts (accuracy), and for a
  gated model how many hard gates flip.
Both models run in onnxruntime through `InferenceModel` (the runtime `predict` and the served
models use), batched as `predict` batches, so the numbers are what serving will see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import ConfigError, DataError
from attndeploy.interface import ATTENTION_MASK, CLASSIFICATION, INPUT_IDS
from attndeploy.quantize.options import DEFAULT_GRID
from attndeploy.runtime import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TEXT_BYTES
from attndeploy.runtime.model import InferenceModel
from attndeploy.runtime.names import GATES
from attndeploy.runtime.text import encode_texts
from attndeploy.runtime.tokenizer import pad_sequences
from attndeploy.validate.families import FamilyChecks, family_checks


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
    max_logit_change: float  # the largest |change| of the decision output (real tokens)
    label_agreement: float | None  # share of decisions that stay; None: the family takes none
    gate_flips: int | None  # gated variants: hard gates that differ, over real tokens
    shapes: list[tuple[int, ...]]  # BATCHxSEQ; a model of fixed-size inputs, its [B, C, H, W]
    agreement: str = "label agreement"  # the family's name for `label_agreement`


def model_checks(model: InferenceModel) -> FamilyChecks:
    """The checks part of the family of `model` (by the head its metadata records)."""
    return family_checks(model.head)


def _decisions(checks: FamilyChecks, a: np.ndarray, b: np.ndarray) -> tuple[int, int] | None:
    """(decisions that agree, decisions) between two batches of decision rows [N, ...]."""
    agree = checks.agreement(a, b)
    if agree is None:
        return None
    agree = np.asarray(agree, bool)
    return int(agree.sum()), int(agree.size)


def compare_on_grid(fp32: InferenceModel, int8: InferenceModel,
                    feeds: list[dict[str, np.ndarray]],
                    checks: FamilyChecks | None = None) -> GridCheck:
    checks = checks or model_checks(fp32)
    name = checks.decision_output
    largest, same, rows, flips = 0.0, 0, 0, 0
    decided = True
    for feed in feeds:
        a = fp32.run(feed[INPUT_IDS], feed[ATTENTION_MASK])
        b = int8.run(feed[INPUT_IDS], feed[ATTENTION_MASK])
        real = feed[ATTENTION_MASK].astype(bool)  # [B, T]
        rows_a = checks.decision_rows(name, a[name], real)  # [B, C] or [N, C] (real tokens)
        rows_b = checks.decision_rows(name, b[name], real)
        largest = max(largest, float(np.abs(rows_a - rows_b).max()))
        counted = _decisions(checks, rows_a, rows_b)
        if counted is None:
            decided = False
        else:
            same, rows = same + counted[0], rows + counted[1]
        if GATES in a:
            flips += int((a[GATES] != b[GATES])[real].sum())
    return GridCheck(largest, same / rows if decided and rows else None,
                     flips if fp32.gated else None,
                     [(f[INPUT_IDS].shape[0], f[INPUT_IDS].shape[1]) for f in feeds],
                     checks.agreement_name)


@dataclass
class DataCheck:
    texts: int
    label_agreement: float | None  # share of decisions (texts, real tokens) that stay
    fp32_accuracy: float | None  # the family's score (accuracy); None: it scores no texts
    int8_accuracy: float | None
    file: str
    gate_flips: int | None = None  # gated variants: hard gates that differ, over the tokens
    gates: int | None = None  # gated variants: the texts' tokens (gates compared)
    agreement: str = "label agreement"  # the family's names for the two statistics
    score: str = "accuracy"
    unit: str = "texts"  # what `texts` counts: the family's examples (an image model's images)

    @property
    def accuracy_drop(self) -> float | None:
        if self.fp32_accuracy is None or self.int8_accuracy is None:
            return None
        return self.fp32_accuracy - self.int8_accuracy


def read_labelled(path: Path, labels: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """Texts and label indices of a JSONL file of {"text", "label"}; a label the model does not
    have fails naming it (text classification's `read_examples`)."""
    from attndeploy.validate.families import checks_part

    return checks_part(CLASSIFICATION).read_examples(Path(path), labels)


def read_examples(path: Path, model: InferenceModel) -> tuple[list[str], Sequence[Any] | None]:
    """The texts of a data file and their gold answers (None where the family scores none), as
    `model`'s family reads them."""
    return model_checks(model).read_examples(Path(path), model.labels)


def text_outputs(model: InferenceModel, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE
                 ) -> list[dict[str, np.ndarray]]:
    """Each text's outputs, cut to its real tokens along the token axis of the per-token
    outputs (`gates` [T], and e.g. tagging `logits` [T, C]); a text-level output ([C]) whole.
    Texts are truncated to max_seq and run as `predict` runs them: sorted by length, in
    batches of `batch_size`."""
    checks = model_checks(model)
    encoded = encode_texts(model.tokenizer, texts, max_seq=model.max_seq, truncate=True,
                           max_bytes=DEFAULT_MAX_TEXT_BYTES)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))  # stable
    results: list[dict[str, np.ndarray]] = [{} for _ in encoded]
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        input_ids, attention_mask = pad_sequences([encoded[i].ids for i in rows])  # [B, T]
        outputs = model.run(input_ids, attention_mask)
        for k, row in enumerate(rows):
            length = len(encoded[row].ids)
            results[row] = {
                name: value[k, :length]
                if name == GATES or name in checks.per_token_outputs else value[k]
                for name, value in outputs.items()
            }
    return results


def compare_on_texts(fp32: InferenceModel, int8: InferenceModel, texts: list[str],
                     gold: Sequence[Any] | None, file: str,
                     checks: FamilyChecks | None = None) -> DataCheck:
    checks = checks or model_checks(fp32)
    if fp32.tokenizer is None:
        raise DataError(f"{fp32.path} holds no vocabulary, so it cannot read --data texts")
    name = checks.decision_output
    before, after = text_outputs(fp32, texts), text_outputs(int8, texts)
    per_token = name in checks.per_token_outputs

    def rows(outputs: list[dict[str, np.ndarray]]) -> np.ndarray:  # [N, C]
        arrays = [o[name] for o in outputs]
        return np.concatenate(arrays) if per_token else np.stack(arrays)

    counted = _decisions(checks, rows(before), rows(after))
    scored = gold is not None and checks.score is not None
    flips = gates = None
    if fp32.gated:  # gates [T] per text, over its real tokens
        flips = sum(int((p[GATES] != q[GATES]).sum()) for p, q in zip(before, after, strict=True))
        gates = sum(len(p[GATES]) for p in before)
    return DataCheck(
        texts=len(texts),
        label_agreement=None if counted is None else counted[0] / counted[1],
        fp32_accuracy=checks.score([o[name] for o in before], gold) if scored else None,
        int8_accuracy=checks.score([o[name] for o in after], gold) if scored else None,
        file=file, gate_flips=flips, gates=gates,
        agreement=checks.agreement_name, score=checks.score_name,
    )


def to_dict(check: GridCheck | DataCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    record = asdict(check)
    if isinstance(check, DataCheck):
        record["accuracy_drop"] = check.accuracy_drop
    return record
