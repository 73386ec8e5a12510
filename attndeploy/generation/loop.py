"""The generation loop over an exported decoder (numpy + onnxruntime, no torch): left-padded
batches of prompts, prefill from the empty past, then one token per step with the cache carried
present -> past by the names the metadata lists (issue #49).

Letters: B prompts, W the longest prompt (in tokens, `<bos>` included), n new tokens fed this
step, T tokens seen (pads included), V vocabulary.

    prefill  input_ids [B, W] (left-padded), attention_mask [B, W], position_ids [B, W]
             (each token's place among its row's real ones), every past entry empty (P = 0)
    step     input_ids [B, 1] (the token just chosen), attention_mask [B, T] (ones appended),
             position_ids [B, 1], the previous step's `present.*` as `past_key_values.*`

A row stops at `<eos>`, at its stop text (the text is cut before it) or after
`max_new_tokens`; the loop ends when every row has. A prompt plus `max_new_tokens` must fit the
context (W + max_new_tokens <= max_seq), else one ConfigError says so before any work.
`on_text(row, piece)` is called with each row's new text as it becomes final (text that may yet
turn out to start the stop text is held back until it does not).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attndeploy.errors import ConfigError, DataError, ModelError
from attndeploy.generation.metadata import DecoderMetadata, parse_decoder_metadata
from attndeploy.generation.sampling import Sampling, TokenChooser
from attndeploy.generation.text_stream import TextStream
from attndeploy.generation.tokenizer import LMTokenizer, tokenizer_from_record

OnText = Callable[[int, str], None]
DEFAULT_MAX_NEW_TOKENS = 32


@dataclass
class Generation:
    """One prompt's continuation: its `text`, `token_ids` (no `<eos>`), and why it ended:
    "eos", "stop" or "length"."""

    text: str
    token_ids: list[int]
    finish_reason: str
    prompt_tokens: int

    def to_dict(self) -> dict:
        return {"text": self.text, "token_ids": self.token_ids,
                "finish_reason": self.finish_reason, "prompt_tokens": self.prompt_tokens}


@dataclass
class Timings:
    """The last `generate`'s clock: time to the first token (prefill + choice) and each decode
    step's seconds."""

    first_token_s: float = 0.0
    step_s: list[float] = field(default_factory=list)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) int64 [B, W], each row's tokens at the right end."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # [B, W]
    mask = np.zeros((len(rows), width), dtype=np.int64)  # [B, W]
    for b, row in enumerate(rows):
        ids[b, width - len(row):] = row
        mask[b, width - len(row):] = 1
    return ids, mask


def positions(mask: np.ndarray) -> np.ndarray:
    """int64 [B, T]: each token's place among its row's real tokens (pads 0)."""
    return np.maximum(np.cumsum(mask, axis=-1) - 1, 0).astype(np.int64)


class DecoderModel:
    """An exported decoder in process: `generate(prompts, ...)` and `generate_ids(...)`."""

    def __init__(self, path: Path | str, *, threads: int | None = None,
                 providers: Sequence[str] = ("CPUExecutionProvider",)) -> None:
        from attndeploy.runtime.sessions import create_session

        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: no such ONNX file")
        try:
            self.session = create_session(self.path, providers=providers,
                                          threads=threads or None)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelError(f"{self.path}: onnxruntime cannot load it "
                             f"({str(exc).splitlines()[0][:200]})") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        self.metadata: DecoderMetadata = parse_decoder_metadata(meta, str(self.path))
        self.tokenizer = tokenizer_from_record(self.metadata.tokenizer)
        self.timings = Timings()

    # ------------------------------------------------------------------ one step

    def empty_state(self, batch: int) -> dict[str, np.ndarray]:
        return {entry.past: entry.empty(batch) for entry in self.metadata.state}

    def step(self, ids: np.ndarray, mask: np.ndarray, position_ids: np.ndarray,
             state: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One run of the graph: (logits [B, n, V], the next past state)."""
        feed = {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids, **state}
        outputs = self.session.run(None, feed)
        names = [o.name for o in self.session.get_outputs()]
        by_name = dict(zip(names, outputs, strict=True))
        present = {e.past: by_name[e.present] for e in self.metadata.state}
        return by_name["logits"], present

    # ------------------------------------------------------------------ the loop

    def check_lengths(self, prompt_lengths: Sequence[int], max_new_tokens: int) -> None:
        if max_new_tokens <= 0:
            raise ConfigError(f"max-new-tokens must be at least 1, got {max_new_tokens}")
        if not prompt_lengths or min(prompt_lengths) < 1:
            raise DataError("every prompt needs at least one token")
        longest = max(prompt_lengths)
        if longest + max_new_tokens > self.metadata.max_seq:
            raise ConfigError(
                f"a prompt of {longest} tokens plus {max_new_tokens} new tokens is beyond the "
                f"model's context of {self.metadata.max_seq}: shorten the prompt or ask for at "
                f"most {max(self.metadata.max_seq - longest, 0)} new tokens")

    def generate_ids(self, prompts: Sequence[Sequence[int]],
                     max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, *,
                     sampling: Sampling | None = None,
                     on_token: Callable[[np.ndarray, np.ndarray], bool] | None = None,
                     use_cache: bool = True) -> list[list[int]]:
        """The new ids of each prompt (until `<eos>`, exclusive, or `max_new_tokens`).
        `on_token(ids [B], done [B]) -> stop all` sees each step's choice; `use_cache=False`
        re-runs every token seen from the empty past each step (for measurements)."""
        self.check_lengths([len(p) for p in prompts], max_new_tokens)
        chooser = TokenChooser(sampling or Sampling())
        eos, pad = self.metadata.eos_token_id, self.metadata.pad_token_id
        ids, mask = left_pad(prompts, pad)  # [B, W]
        batch = len(prompts)
        out: list[list[int]] = [[] for _ in range(batch)]
        done = np.zeros(batch, dtype=bool)
        self.timings = Timings()
        started = time.perf_counter()
        logits, state = self.step(ids, mask, positions(mask), self.empty_state(batch))
        seen_ids, seen_mask = ids, mask
        for index in range(max_new_tokens):
            chosen = chooser.choose(logits[:, -1])  # [B]
            if index == 0:
                self.timings.first_token_s = time.perf_counter() - started
            chosen = np.where(done, eos, chosen)
            done_now = done | (chosen == eos)
            for b in np.flatnonzero(~done_now):
                out[b].append(int(chosen[b]))
            done = done_now
            if on_token is not None and on_token(chosen, done):
                done[:] = True
            if done.all() or index == max_new_tokens - 1:
                break
            step_started = time.perf_counter()
            seen_mask = np.concatenate([seen_mask, np.ones((batch, 1), np.int64)], axis=1)
            seen_ids = np.concatenate([seen_ids, chosen[:, None]], axis=1)  # [B, T]
            if use_cache:
                logits, state = self.step(chosen[:, None], seen_mask,
                                          positions(seen_mask)[:, -1:], state)
            else:
                logits, _ = self.step(seen_ids, seen_mask, positions(seen_mask),
                                      self.empty_state(batch))
            self.timings.step_s.append(time.perf_counter() - step_started)
        return out

    def _require_tokenizer(self) -> LMTokenizer:
        if self.tokenizer is None:
            raise ModelError(f"{self.path} has no tokenizer in its metadata: it cannot take "
                             "text (export a checkpoint trained with `attndeploy train --data`)")
        return self.tokenizer

    def generate(self, prompts: str | Sequence[str],
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, *,
                 temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, stop: str | None = None,
                 on_text: OnText | None = None) -> list[Generation]:
        """The continuation of each prompt (greedy unless sampling is asked for)."""
        tokenizer = self._require_tokenizer()
        texts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not texts:
            raise DataError("no prompt given")
        if stop == "":
            raise ConfigError("the stop text must not be empty")
        sampling = Sampling.asked(temperature, top_k, top_p, seed)
        encoded = [tokenizer.encode(t, bos=True) for t in texts]
        streams = [TextStream(tokenizer, row[-1], self.metadata.eos_token_id, stop)
                   for row in encoded]

        def on_token(chosen: np.ndarray, done: np.ndarray) -> bool:
            for b, token in enumerate(chosen):
                piece = streams[b].push(int(token))
                if on_text is not None and piece:
                    on_text(b, piece)
            done |= np.array([s.done for s in streams])
            return bool(done.all())

        self.generate_ids(encoded, max_new_tokens, sampling=sampling, on_token=on_token)
        results = []
        for b, stream in enumerate(streams):
            rest = stream.flush()
            if on_text is not None and rest:
                on_text(b, rest)
            results.append(Generation(stream.text, stream.token_ids, stream.reason,
                                      len(encoded[b])))
        return results
