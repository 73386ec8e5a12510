"""An exported translation model as the continuous batcher's model (numpy + onnxruntime; shipped
in a translation `NAME_generate`): the source sentence is the request's prompt, and admitting a
request runs the encoder once on it (`prefill`), then the decoder on `<s>`.

What `attndeploy.generation.batching.ContinuousBatcher` uses, as it uses a decoder's
`loop.DecoderModel`: `metadata` (`state`: every carried entry; `source_mask`: the entry that
marks each row's real source columns; `eos_token_id`), `tokenizer`, `check_request`, `prefill`
and `step`. A row's state is the decoder's own carried list (`attndeploy.decoder_state`: the
self-attention cache along "past", the cross keys and values and Evolving Attention's cross rows
along "source") plus the encoder's `encoder_attention_mask` [1, S]: per request, merged into
the running batch like the cache (`batching`'s docstring says how rows of different lengths
are padded). Each decode step feeds the batch's `decoder_attention_mask` [B, P+1] (1 = a real
target token): rows that joined later have left-padded self caches.

Greedy and sampled decoding only; beam search is the in-process `attndeploy generate
--num-beams` (`seq2seq_onnx.OnnxSeq2Seq.translate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import ConfigError, DataError, ModelError
from attndeploy.generation.batching import Start
from attndeploy.generation.metadata import StateEntry
from attndeploy.generation.seq2seq_onnx import TARGET_MASK, OnnxSeq2Seq

SOURCE_MASK = "encoder_attention_mask"


@dataclass(frozen=True)
class Seq2SeqServing:
    """What the batcher reads of a translation model (see the module docstring)."""

    variant: str
    state: tuple[StateEntry, ...]
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int
    max_source: int
    max_target: int
    source_mask: str = SOURCE_MASK


class ServedSeq2Seq:
    """The export folder's encoder and decoder, served (see the module docstring)."""

    def __init__(self, folder: Path | str, *, threads: int | None = None) -> None:
        self.onnx = OnnxSeq2Seq(folder, threads=threads)
        if not self.onnx.takes_target_mask:
            raise ModelError(f"{folder}: the decoder has no {TARGET_MASK} input (exported "
                             "before translations were served): re-export the checkpoint "
                             "with `attndeploy export`")
        self.tokenizer = self.onnx.tokenizer
        entries = [StateEntry(s["past"], s["present"], s["dtype"], tuple(s["dims"]))
                   for s in self.onnx.state_specs]
        entries.append(StateEntry(SOURCE_MASK, SOURCE_MASK, "bool", ("batch", "source")))
        self.metadata = Seq2SeqServing(
            variant=self.onnx.variant, state=tuple(entries),
            bos_token_id=self.onnx.bos_id, eos_token_id=self.onnx.eos_id,
            pad_token_id=self.onnx.pad_id, max_source=self.onnx.max_source,
            max_target=self.onnx.max_target)

    def prompt_ids(self, text: str) -> list[int]:
        """A source sentence's ids with `</s>`, as `OnnxSeq2Seq.translate` encodes it (never
        cut: a source beyond the model is refused by `check_request`)."""
        if not text.strip():
            raise DataError("the source sentence is empty")
        ids = self.tokenizer.encode(text, bos=False)
        if not ids:
            raise DataError("the source sentence has no tokens")
        return [*ids, self.onnx.eos_id]

    def check_request(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        """ConfigError / DataError unless a source of 2..max_source ids (its `</s>` included)
        and 1..max_target new tokens."""
        if max_new_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {max_new_tokens}")
        if max_new_tokens > self.onnx.max_target:
            raise ConfigError(f"max_tokens {max_new_tokens} is beyond the model's "
                              f"{self.onnx.max_target} target tokens")
        if len(prompt_ids) < 2:
            raise DataError("the source sentence has no tokens")
        if len(prompt_ids) > self.onnx.max_source:
            raise ConfigError(f"the source has {len(prompt_ids)} tokens (its </s> included), "
                              f"over the model's {self.onnx.max_source}")

    def prefill(self, prompt_ids: list[int]) -> Start:
        """Encode the source once and decode `<s>`: the row's first logits and whole state."""
        source = np.asarray([prompt_ids], dtype=np.int64)  # [1, S]
        memory_mask, state = self.onnx.encode(source, np.ones_like(source))
        state[SOURCE_MASK] = memory_mask  # [1, S] bool
        start = np.full((1, 1), self.onnx.bos_id, dtype=np.int64)  # [1, 1]
        target_mask = np.ones((1, 1), dtype=np.int64)  # [1, P+1], P = 0
        logits, state = self.step(start, target_mask, np.zeros((1, 1), np.int64), state)
        return Start(logits[:, -1], target_mask, state, self.onnx.bos_id)

    def step(self, ids: np.ndarray, mask: np.ndarray, position_ids: np.ndarray,
             state: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One decoder run: ids [B, 1], mask [B, P+1] over the target tokens, position_ids
        [B, 1] -> (logits [B, 1, V], the state after it: constants kept, the rest replaced)."""
        feed: dict[str, Any] = {"input_ids": ids, "position_ids": position_ids,
                                TARGET_MASK: mask, **state}
        outputs = dict(zip(self.onnx.decoder_outputs, self.onnx.decoder.run(None, feed),
                           strict=True))
        changed = {spec["past"]: outputs[spec["present"]] for spec in self.onnx.state_specs
                   if spec["present"] is not None}
        return outputs["logits"], {**state, **changed}
