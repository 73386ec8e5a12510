"""token-classification's training part: a per-token head, softmax (cross-entropy per labelled
token, each token's argmax) or a linear-chain CRF (`ModelConfig.tag_head = "crf"`: the
forward-algorithm loss, Viterbi decoding, `attndeploy.models.crf`); entity-level precision,
recall and F1 (`f1` primary) beside token accuracy; the gazetteer baseline (`baseline_f1`); and
tagged files: JSONL {"tokens", "tags"} and CoNLL columns (`reading.py`).

The protocol every family's training part follows is in `attndeploy.training.families`; this
part also defines its optional head-aware hooks, which see the head module as well as its
`logits` (a CRF's loss and decoding need its transitions):

  head_loss(head, logits, labels, label_smoothing=0.0) -> scalar Tensor
  head_metric_sums(head, logits, labels, label_names) -> dict[str, float]

Labels are int64 [N, T], `IGNORE_INDEX` (-100, torch cross_entropy's default) exactly at pads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.data.dataset import IGNORE_INDEX
from attndeploy.errors import DataError
from attndeploy.families.token_classification.scheme import allowed_transitions
from attndeploy.families.token_classification.training.entities import (
    entity_scores,
    gazetteer_scores,
    span_counts,
)
from attndeploy.models.crf import LinearChainCRF
from attndeploy.variants.api import LayerContext

# ----------------------------------------------------------------------------- the model


class CRFTagger(nn.Module):
    """Emissions from a linear layer over every token, scored by a linear-chain CRF: the
    model's `logits` output is the emissions [B, T, C]; decoding is the CRF's Viterbi."""

    def __init__(self, width: int, num_labels: int) -> None:
        super().__init__()
        self.emit = nn.Linear(width, num_labels)
        self.crf = LinearChainCRF(num_labels)

    def forward(self, h: Tensor) -> Tensor:
        return self.emit(h)  # [B, T, C]


def build_head(config: Any, width: int, gated: bool) -> nn.Module:
    """One linear layer applied to every token (no pooling, so no gated op of its own); with
    `config.tag_head == "crf"`, that layer's emissions scored by a CRF (`CRFTagger`)."""
    if getattr(config, "tag_head", "softmax") == "crf":
        return CRFTagger(width, config.num_labels)
    return nn.Linear(width, config.num_labels)


def name_labels(head: nn.Module, config: Any, label_names: tuple[str, ...]) -> None:
    """A CRF head with `config.crf_constraints == "scheme"` forbids the transitions, first and
    last tags the label names' tagging scheme forbids (BIO, BIOES/BMES; a plain tag set
    forbids none)."""
    if isinstance(head, CRFTagger) and getattr(config, "crf_constraints", "none") == "scheme":
        head.crf.forbid(*allowed_transitions(label_names))


def apply_head(head: nn.Module, h: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
    """h [B, T, D] -> (logits [B, T, C] (a CRF's emissions), None: no pooling applied gates)."""
    return head(h), None


def loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits [B, T, C] against tags [B, T], pads (IGNORE_INDEX) left out."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                           label_smoothing=label_smoothing)


def head_loss(head: nn.Module | None, logits: Tensor, labels: Tensor,
              label_smoothing: float = 0.0) -> Tensor:
    """A CRF head's negative log-likelihood (mean over sentences; no smoothing), else `loss`."""
    if isinstance(head, CRFTagger):
        return head.crf.nll(logits, labels, labels != IGNORE_INDEX)
    return loss(logits, labels, label_smoothing)


def decode(head: nn.Module | None, logits: Tensor, mask: Tensor) -> Tensor:
    """The best tag ids int64 [B, T] (0 at pads): a CRF's Viterbi path, else each argmax."""
    if isinstance(head, CRFTagger):
        with torch.no_grad():  # decoding has no loss
            return head.crf.viterbi(logits, mask)
    return logits.argmax(-1).masked_fill(~mask, 0)


# ----------------------------------------------------------------------------- labels

LABEL_DTYPE = torch.long  # one tag index per token: int64 [N, T]


def check_label_names(label_names: tuple[str, ...]) -> None:
    if len(label_names) < 2 or len(set(label_names)) != len(label_names):
        raise DataError(f"label_names must hold at least 2 distinct names; got {label_names!r}")


def check_labels(labels: Tensor, attention_mask: Tensor, num_labels: int) -> None:
    """labels int64 [N, T], IGNORE_INDEX exactly at pads, each real token's in [0, num_labels)."""
    if labels.shape != attention_mask.shape:
        raise DataError(f"tagging labels must be [N, T] = {tuple(attention_mask.shape)}; "
                        f"got {tuple(labels.shape)}")
    real = attention_mask.bool()
    if (labels[~real] != IGNORE_INDEX).any():
        raise DataError(f"tagging labels must be {IGNORE_INDEX} at padded positions")
    valid = labels[real]
    if ((valid < 0) | (valid >= num_labels)).any():
        raise DataError(f"labels must lie in [0, {num_labels}) for {num_labels} label names")


def labels_tensor(values: Sequence[Sequence[int]], width: int) -> Tensor:
    """int64 [N, width] from one tag list per example, IGNORE_INDEX past each one's end."""
    labels = torch.full((len(values), width), IGNORE_INDEX, dtype=torch.long)  # [N, T]
    for row, tags in enumerate(values):
        labels[row, : len(tags)] = torch.tensor(list(tags), dtype=torch.long)
    return labels


def batch_labels(labels: Tensor, width: int) -> Tensor:
    """A batch's labels [B, T] trimmed to its longest real sequence: [B, width]."""
    return labels[:, :width]


def join_labels(first: Tensor, second: Tensor, width: int) -> Tensor:
    """[N1, t1] and [N2, t2] -> [N1 + N2, width], padded with IGNORE_INDEX."""
    def padded(tensor: Tensor) -> Tensor:  # [N, t] -> [N, width]
        return F.pad(tensor, (0, width - tensor.shape[1]), value=IGNORE_INDEX)
    return torch.cat([padded(first), padded(second)])


# ----------------------------------------------------------------------------- evaluation

PRIMARY_METRIC = "f1"  # entity-level, exact spans (`entities.py`)
GREATER_IS_BETTER = True


def _tag_rows(ids: Tensor, labels: Tensor, label_names: Sequence[str]) -> list[list[str]]:
    """Tag ids [B, T] -> one list of tag names per row, its labelled tokens only."""
    lengths = (labels != IGNORE_INDEX).sum(-1).tolist()
    return [[label_names[i] for i in row[:n]] for row, n in zip(ids.tolist(), lengths,
                                                                strict=True)]


def metric_sums(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """Correct tags and labelled tokens of one batch (pads left out); without the label names
    (a caller before `head_metric_sums`), no entities."""
    valid = labels != IGNORE_INDEX
    return {"correct": int((logits.argmax(-1) == labels)[valid].sum()), "total": int(valid.sum())}


def head_metric_sums(head: nn.Module | None, logits: Tensor, labels: Tensor,
                     label_names: Sequence[str]) -> dict[str, float]:
    """One batch's correct tags, labelled tokens and entity counts, the tags decoded as the
    model decodes them (`decode`: Viterbi for a CRF head)."""
    valid = labels != IGNORE_INDEX  # [B, T]
    best = decode(head, logits, valid)  # [B, T]
    counts = span_counts(_tag_rows(best, labels, label_names),
                         _tag_rows(labels.clamp(min=0), labels, label_names))
    return {"correct": int((best == labels)[valid].sum()), "total": int(valid.sum()), **counts}


def metrics(sums: dict[str, float]) -> dict[str, float]:
    """accuracy over labelled tokens, then entity precision, recall and f1 (when counted)."""
    out = {"accuracy": sums.get("correct", 0) / max(1, sums.get("total", 0))}
    if "entities_gold" in sums:
        out.update(entity_scores(sums))
    return out


def fit_baseline(fit_docs: Sequence[Sequence[str]], fit_labels: Sequence[Tensor],
                 eval_docs: Sequence[Sequence[str]], eval_labels: Tensor,
                 label_names: tuple[str, ...]) -> dict[str, Any]:
    """The gazetteer of the fitted sentences' entities, matched longest first on the held-out
    ones (`entities.gazetteer_scores`): baseline, baseline_f1, baseline_precision, ..."""
    fit_tags = [tags for part in fit_labels for tags in _tag_rows(part.clamp(min=0), part,
                                                                   label_names)]
    eval_tags = _tag_rows(eval_labels.clamp(min=0), eval_labels, label_names)
    return {"baseline": "gazetteer",
            **gazetteer_scores(fit_docs, fit_tags, eval_docs, eval_tags)}


# ----------------------------------------------------------------------------- data files

# `train --data FILE`: JSONL {"tokens", "tags"} or CoNLL columns, the tags checked against their
# scheme, the splitting rule (words or characters) chosen once and stored (`reading.py`).
from attndeploy.families.token_classification.training.reading import (  # noqa: E402
    FILE_SUFFIXES,
    JSONL_KEYS,
    jsonl_line,
    label_encoder,
    label_names_of,
    read_example,
    read_file,
    tokenizer_class,
)

__all__ = ["FILE_SUFFIXES", "JSONL_KEYS", "jsonl_line", "label_encoder", "label_names_of",
           "read_example", "read_file", "tokenizer_class"]
