"""Continuous (in-flight) batching over an exported decoder (numpy only; the session is the
model's): requests that arrive while others decode join the running batch at the next step,
finished or cancelled ones leave it. The served generate model (`<name>_generate`) ships this
module and runs `ContinuousBatcher.run` in a thread; tests drive `step()` directly.

Letters: B running sequences, T the batch's mask width, P an entry's past length, V vocab.

Each step:

1. **Admit.** Up to `max_batch` - B waiting requests are prefilled ALONE (input_ids [1, L],
   attention_mask ones [1, L], position_ids 0..L-1, the empty past), exactly as the in-process
   loop prefills one prompt, and their first token is chosen. A sequence not done then joins
   the batch (`merge`).
2. **Decode.** One run for all B: input_ids [B, 1] (each row's last token), attention_mask
   [B, T+1] (ones appended), position_ids [B, 1] (each row's count of real tokens), past = the
   batch's state. Each row chooses with its own `TokenChooser` (its own seed), so a seeded
   sampled sequence draws what it would alone.
3. **Retire.** Rows done (`<eos>`, stop text, `max_tokens`) or cancelled leave; the state and
   mask drop their rows, then the leading columns no row uses any more (`trim`).

Cache padding: rows of one batch have different past lengths, so every state entry with a
"past" axis is LEFT-padded with zeros (False for masks) to the batch's longest, as the loop's
left-padded prompts are. Entries aligned with the attention mask (key/value of standard, QVI,
Evolving Attention, Evolving's `evolving_rows`, QVI's Ṽ: length T) are padded with it, and their
pad columns are masked (0) for the row. GA-Net keeps only open tokens, so its `key`, `value`
and `key_mask` have their own length (P <= T, per row by its gates): they are padded with
`key_mask` False, which is how the graph already marks unused slots. Entries without a past
axis (QVI's running sums, GA-Net's gate-network state) are per row and just stacked.
`trim` removes a leading column only when no row uses it (mask 0 / key_mask False in every
row), so the batch's width follows the longest live row, not every row ever seen.

Encoder-decoders (a translation export, `attndeploy.generation.seq2seq_serve`): the model
offers `prefill(prompt_ids) -> Start`, run at admission instead of the decoder prefill above:
it runs the encoder ONCE on the source, then the decoder on `<s>`, and hands back the row's
whole state: its self-attention cache (a "past" axis, as above) and its per-request constants,
the cross keys and values, the source mask and Evolving Attention's cross rows, whose dims hold
"source" (S, the row's source length). Rows' sources differ in length, so those entries are
RIGHT-padded along "source" to the batch's longest, with the source mask False there (the
cross-attention reads no masked column; Evolving Attention's cross map zeroes them, as a
padded source in one batch); `trim` drops trailing source columns no row's mask uses. The
model's `check_request(prompt_ids, max_new_tokens)`, when it has one, replaces the decoder's
context rule.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attndeploy.errors import ConfigError, DataError
from attndeploy.generation.sampling import Sampling, TokenChooser
from attndeploy.generation.text_stream import TextStream

KEY_MASK = "key_mask"  # GA-Net: the entry that marks which key slots of its layer are real


@dataclass
class GenerateRequest:
    """One sequence to generate. `on_piece(text, token_ids)` gets each step's new final text and
    the new token ids kept; `on_done(result | error)` is called exactly once: a `Finished`, or
    the exception that ended it. `is_cancelled()` is polled each step (a client gone)."""

    prompt_ids: list[int]
    max_new_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    stop: str | None = None
    on_piece: Callable[[str, list[int]], None] = lambda text, ids: None
    on_done: Callable[[Any], None] = lambda result: None
    is_cancelled: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class Finished:
    text: str
    token_ids: list[int]
    finish_reason: str  # "eos", "stop", "length" or "cancelled"
    prompt_tokens: int


@dataclass
class _Row:
    request: GenerateRequest
    stream: TextStream
    chooser: TokenChooser
    last: int  # the token to feed next
    real: int  # real tokens in the cache (the next token's position)
    chosen: int = 0  # tokens chosen so far


def check_request(metadata: Any, prompt_ids: list[int], max_new_tokens: int,
                  max_prompt_tokens: int | None = None) -> None:
    """ConfigError / DataError unless the request fits: a prompt of 1..max_prompt_tokens ids,
    at least one new token, and prompt + new tokens within the model's context."""
    if max_new_tokens < 1:
        raise ConfigError(f"max_tokens must be at least 1, got {max_new_tokens}")
    if len(prompt_ids) < 1:
        raise DataError("the prompt is empty")
    if max_prompt_tokens is not None and len(prompt_ids) > max_prompt_tokens:
        raise ConfigError(f"the prompt has {len(prompt_ids)} tokens, over the cap of "
                          f"{max_prompt_tokens}")
    if len(prompt_ids) + max_new_tokens > metadata.max_seq:
        raise ConfigError(
            f"a prompt of {len(prompt_ids)} tokens plus {max_new_tokens} new tokens is beyond "
            f"the model's context of {metadata.max_seq}: ask for at most "
            f"{max(metadata.max_seq - len(prompt_ids), 0)} new tokens")


def _pad_left(array: np.ndarray, axis: int, width: int) -> np.ndarray:
    """`array` with zeros (False) added before its `axis` entries up to `width`."""
    missing = width - array.shape[axis]
    if missing <= 0:
        return array
    pads = [(0, 0)] * array.ndim
    pads[axis] = (missing, 0)
    return np.pad(array, pads)


def _pad_right(array: np.ndarray, axis: int, width: int) -> np.ndarray:
    """`array` with zeros (False) added after its `axis` entries up to `width`."""
    missing = width - array.shape[axis]
    if missing <= 0:
        return array
    pads = [(0, 0)] * array.ndim
    pads[axis] = (0, missing)
    return np.pad(array, pads)


def _source_axis(entry: Any) -> int | None:
    """The axis of an encoder-decoder's per-request entry that runs over the source."""
    return entry.dims.index("source") if "source" in entry.dims else None


def _layer_of(name: str) -> str:
    return name.rsplit(".", 1)[0]  # past_key_values.3.key -> past_key_values.3


@dataclass
class Start:
    """A request after its prefill: the logits of its first choice [1, V], its attention mask
    [1, t] and state (batch first, every entry of the model's metadata), and the prompt id its
    text stream follows (the prompt's last; an encoder-decoder's `<s>`)."""

    logits: np.ndarray
    mask: np.ndarray
    state: dict[str, np.ndarray]
    stream_after: int


class BatchState:
    """The running batch's cache: `mask` int64 [B, T] and `state` {past name: array, batch
    first}, rows in the order of `ContinuousBatcher.rows`. `entries` is the metadata's list."""

    def __init__(self, entries: Any, source_mask: str | None = None) -> None:
        self.entries = tuple(entries)
        self.mask = np.zeros((0, 0), np.int64)  # [B, T]
        self.state: dict[str, np.ndarray] = {}
        self.keyed = {_layer_of(e.past) for e in self.entries if e.past.endswith("." + KEY_MASK)}
        self.source_mask = source_mask  # an encoder-decoder's entry: which source columns count

    @property
    def size(self) -> int:
        return self.mask.shape[0]

    def merge(self, mask: np.ndarray, state: dict[str, np.ndarray]) -> None:
        """Append rows (their `mask` [b, t] and `state`), left-padding both sides' past axes."""
        if self.size == 0:
            self.mask, self.state = mask, dict(state)
            return
        width = max(self.mask.shape[1], mask.shape[1])
        self.mask = np.concatenate([_pad_left(self.mask, 1, width), _pad_left(mask, 1, width)])
        for entry in self.entries:
            ours, theirs = self.state[entry.past], state[entry.past]
            axis = entry.past_axis
            if axis is not None:
                longest = max(ours.shape[axis], theirs.shape[axis])
                ours, theirs = _pad_left(ours, axis, longest), _pad_left(theirs, axis, longest)
            source = _source_axis(entry)
            if source is not None:  # per-request constants: the source runs left to right
                longest = max(ours.shape[source], theirs.shape[source])
                ours = _pad_right(ours, source, longest)
                theirs = _pad_right(theirs, source, longest)
            self.state[entry.past] = np.concatenate([ours, theirs])

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (in this order), then drop the columns none of them uses."""
        index = np.asarray(rows, dtype=np.int64)
        self.mask = self.mask[index]
        self.state = {name: value[index] for name, value in self.state.items()}
        if len(rows):
            self.trim()

    def trim(self) -> None:
        """Remove leading past columns that no row uses (see the module docstring)."""
        width = self.mask.shape[1]
        unused = int(np.argmax(self.mask.any(axis=0))) if self.mask.any() else width
        cuts: dict[str, int] = {}
        for layer in self.keyed:
            slots = self.state[f"{layer}.{KEY_MASK}"]  # [B, P]
            cuts[layer] = int(np.argmax(slots.any(axis=0))) if slots.any() else slots.shape[1]
        for entry in self.entries:
            axis = entry.past_axis
            if axis is None:
                continue
            value = self.state[entry.past]
            layer = _layer_of(entry.past)
            if layer in self.keyed and entry.past.rsplit(".", 1)[-1] in ("key", "value",
                                                                         KEY_MASK):
                cut = cuts[layer]
            elif value.shape[axis] == width:
                cut = unused
            else:
                continue  # an entry of its own length and no mask to tell: left as it is
            if cut:
                self.state[entry.past] = np.take(value, np.arange(cut, value.shape[axis]),
                                                 axis=axis)
        if unused:
            self.mask = self.mask[:, unused:]
        if self.source_mask is not None:
            self._trim_source()

    def _trim_source(self) -> None:
        """Cut trailing source columns that no row's source mask uses (one is always kept: a
        GA-Net row may have closed every source token, and the graph takes no empty source)."""
        used = self.state[self.source_mask].any(axis=0)  # [S]
        width = int(np.flatnonzero(used)[-1]) + 1 if used.any() else 1
        for entry in self.entries:
            axis = _source_axis(entry)
            value = self.state[entry.past]
            if axis is not None and value.shape[axis] > width:
                self.state[entry.past] = np.take(value, np.arange(width), axis=axis)


class ContinuousBatcher:
    """Runs requests through `model` (a `loop.DecoderModel`: `step`, `empty_state`, `metadata`,
    `tokenizer`) with continuous batching, at most `max_batch` sequences at once."""

    def __init__(self, model: Any, max_batch: int = 8) -> None:
        if max_batch < 1:
            raise ConfigError(f"the largest running batch must be at least 1, got {max_batch}")
        self.model = model
        self.max_batch = max_batch
        self.metadata = model.metadata
        self.waiting: queue.Queue[GenerateRequest] = queue.Queue()
        self.rows: list[_Row] = []
        self.source_mask = getattr(self.metadata, "source_mask", None)
        self.batch = BatchState(self.metadata.state, self.source_mask)
        self.steps = 0  # decode runs so far (each over the whole running batch)
        self.largest_batch = 0
        self.finished: Counter[str] = Counter()  # sequences ended, by finish reason / "error"
        self._arrived = threading.Event()

    @property
    def active(self) -> int:
        """Sequences in the running batch."""
        return len(self.rows)

    def submit(self, request: GenerateRequest) -> None:
        """Queue a request (thread-safe); it joins at the next step."""
        self.waiting.put(request)
        self._arrived.set()

    # ------------------------------------------------------------------ one step

    def step(self) -> bool:
        """Admit, decode once, retire. Whether any sequence is still running or waiting."""
        self._admit()
        self._drop_cancelled()
        if self.rows:
            self._decode()
        return bool(self.rows) or not self.waiting.empty()

    def _finish(self, row: _Row, reason: str | None = None) -> None:
        rest = row.stream.flush()
        if rest:
            row.request.on_piece(rest, [])
        stream = row.stream
        self.finished[reason or stream.reason] += 1
        row.request.on_done(Finished(stream.text, list(stream.token_ids),
                                     reason or stream.reason, len(row.request.prompt_ids)))

    def _choose(self, row: _Row, scores: np.ndarray) -> bool:
        """Choose the row's next token from `scores` [1, V], stream it; whether it is done."""
        token = int(row.chooser.choose(scores)[0])
        row.chosen += 1
        kept_before = len(row.stream.token_ids)
        piece = row.stream.push(token)
        new_ids = row.stream.token_ids[kept_before:]
        if piece or new_ids:
            row.request.on_piece(piece, new_ids)
        row.last = token
        return row.stream.done or row.chosen >= row.request.max_new_tokens

    def _admit(self) -> None:
        while len(self.rows) < self.max_batch:
            try:
                request = self.waiting.get_nowait()
            except queue.Empty:
                return
            try:
                self._prefill(request)
            except Exception as exc:  # its own error, the others go on
                request.on_done(exc)

    def _prefill(self, request: GenerateRequest) -> None:
        if request.is_cancelled():
            self.finished["cancelled"] += 1
            request.on_done(Finished("", [], "cancelled", len(request.prompt_ids)))
            return
        own_check = getattr(self.model, "check_request", None)
        if own_check is not None:
            own_check(request.prompt_ids, request.max_new_tokens)
        else:
            check_request(self.metadata, request.prompt_ids, request.max_new_tokens)
        prefill = getattr(self.model, "prefill", None)
        start = (prefill(request.prompt_ids) if prefill is not None
                 else self._prefill_decoder(request.prompt_ids))
        stream = TextStream(self.model.tokenizer, start.stream_after,
                            self.metadata.eos_token_id, request.stop)
        row = _Row(request, stream, TokenChooser(request.sampling), last=-1,
                   real=int(start.mask.sum()))
        if self._choose(row, start.logits):
            self._finish(row)
            return
        self.batch.merge(start.mask, start.state)
        self.rows.append(row)
        self.largest_batch = max(self.largest_batch, len(self.rows))

    def _prefill_decoder(self, prompt_ids: list[int]) -> Start:
        """A decoder's prefill: the prompt alone, from the empty past."""
        ids = np.asarray([prompt_ids], dtype=np.int64)  # [1, L]
        mask = np.ones_like(ids)  # [1, L]
        position_ids = np.arange(ids.shape[1], dtype=np.int64)[None]  # [1, L]
        logits, state = self.model.step(ids, mask, position_ids, self.model.empty_state(1))
        return Start(logits[:, -1], mask, state, prompt_ids[-1])

    def _drop_cancelled(self) -> None:
        keep = []
        for index, row in enumerate(self.rows):
            if row.request.is_cancelled():
                self._finish(row, "cancelled")
            else:
                keep.append(index)
        if len(keep) < len(self.rows):
            self._retain(keep)

    def _retain(self, keep: list[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        self.batch.keep(keep)

    def _decode(self) -> None:
        rows = self.rows
        ids = np.asarray([[row.last] for row in rows], dtype=np.int64)  # [B, 1]
        position_ids = np.asarray([[row.real] for row in rows], dtype=np.int64)  # [B, 1]
        mask = np.concatenate([self.batch.mask, np.ones((len(rows), 1), np.int64)], axis=1)
        try:
            logits, state = self.model.step(ids, mask, position_ids, self.batch.state)
        except Exception as exc:  # the run failed: every running sequence gets the error
            for row in rows:
                self.finished["error"] += 1
                row.request.on_done(exc)
            self.rows, self.batch = [], BatchState(self.metadata.state, self.source_mask)
            return
        self.steps += 1
        self.batch.mask, self.batch.state = mask, state
        keep = []
        for index, row in enumerate(rows):
            row.real += 1
            if self._choose(row, logits[index:index + 1, -1]):
                self._finish(row)
            else:
                keep.append(index)
        if len(keep) < len(rows):
            self._retain(keep)

    # ------------------------------------------------------------------ the thread

    def run(self, stopping: threading.Event, idle_wait_s: float = 0.05,
            after_step: Callable[[ContinuousBatcher], None] | None = None) -> None:
        """Step until `stopping` is set, sleeping on the queue while nothing runs;
        `after_step(self)` is called after each step (gauges of `active` and `finished`)."""
        while not stopping.is_set():
            if not self.rows and self.waiting.empty():
                self._arrived.wait(idle_wait_s)
                self._arrived.clear()
                continue
            self.step()
            if after_step is not None:
                after_step(self)
