"""Teacher-forced perplexity of an exported decoder on texts, through the graph itself (numpy +
onnxruntime, no torch): what `attndeploy quantize` compares between fp32 and int8.

Each text is encoded with `<bos>` and cut at `max_tokens`; texts run in left-padded batches of
`batch` from the empty past (one prefill call per batch, as `DecoderModel.generate_ids` starts),
and every real token after the first is scored by the logits of the token before it:

    logits [B, W, V] -> log-softmax -> log p(ids[:, t+1] | ids[:, :t+1])   [B, W-1]
    scored where attention_mask[:, t] and attention_mask[:, t+1] are both 1

perplexity = exp(total negative log-likelihood / scored tokens). `next_token_agreement` of two
runs is the share of scored places where both models' argmax is the same token (the teacher-forced
counterpart of greedy agreement: it does not cascade after one flip).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attndeploy.errors import DataError
from attndeploy.generation.loop import DecoderModel, left_pad, positions

DEFAULT_BATCH = 8
DEFAULT_MAX_TOKENS = 128


@dataclass
class Scored:
    """One model's teacher-forced pass over texts: the summed negative log-likelihood, the
    scored tokens, and each scored place's argmax (in text order, for agreement)."""

    nll: float
    tokens: int
    argmax: np.ndarray  # [tokens] int64

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.tokens) if self.tokens else float("nan")


def encode_for_scoring(model: DecoderModel, texts: Sequence[str],
                       max_tokens: int = DEFAULT_MAX_TOKENS) -> list[list[int]]:
    """Each text's ids with `<bos>`, at most min(max_tokens, max_seq) of them; texts of fewer
    than two tokens (nothing to score) are left out. DataError when the model has no tokenizer
    or no text is left."""
    if model.tokenizer is None:
        raise DataError(f"{model.path} has no tokenizer in its metadata, so it cannot read "
                        "--data texts (leave --data out: random token prompts are used)")
    limit = min(max_tokens, model.metadata.max_seq)
    rows = [model.tokenizer.encode(text, bos=True)[:limit] for text in texts]
    rows = [row for row in rows if len(row) >= 2]
    if not rows:
        raise DataError("no text of at least one token to score")
    return rows


def score(model: DecoderModel, rows: Sequence[Sequence[int]],
          batch: int = DEFAULT_BATCH) -> Scored:
    """`rows` (token ids, `<bos>` first) teacher-forced through `model` (module docstring)."""
    nll, count, argmax = 0.0, 0, []
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        ids, mask = left_pad(chunk, model.metadata.pad_token_id)  # [B, W]
        logits, _ = model.step(ids, mask, positions(mask), model.empty_state(len(chunk)))
        logits = logits.astype(np.float64)[:, :-1]  # [B, W-1, V]: predicts ids[:, 1:]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        target = ids[:, 1:]  # [B, W-1]
        chosen = np.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]  # [B, W-1]
        scored = (mask[:, :-1] == 1) & (mask[:, 1:] == 1)  # [B, W-1]
        nll -= float(chosen[scored].sum())
        count += int(scored.sum())
        argmax.append(logits.argmax(axis=-1)[scored])
    return Scored(nll, count, np.concatenate(argmax).astype(np.int64))


def next_token_agreement(a: Scored, b: Scored) -> float:
    """The share of scored places where `a` and `b` predict the same next token."""
    if a.argmax.shape != b.argmax.shape or not a.argmax.size:
        raise DataError("the two runs scored different tokens")
    return float((a.argmax == b.argmax).mean())
