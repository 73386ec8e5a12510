"""`InferenceModel`: an exported attndeploy model in this process, texts in, predictions out.

    model = InferenceModel("runs/ganet.onnx", threads=2)
    for p in model.predict(["w3 w17 alpha w8", "bravo w1"]):
        print(p.label, p.probabilities, p.attended)
    outputs = model.run(input_ids, attention_mask)   # int64 [batch, seq] -> {"logits", "gates"}

Everything the model needs comes from its ONNX metadata (`runtime.metadata`): labels, the word
vocabulary, max_seq, the variant and head. `predict` sorts the texts by length and runs them in
batches of neighbours, so a batch pads to nearly its own length, and hands the predictions back
in input order. Padding does not change a model's outputs for the real tokens (docs/ops.md,
"Model-level interface"), so the order of the batches does not matter.

One onnxruntime session serves every call; `InferenceSession.run` is thread-safe and nothing
else here changes after `__init__`, so threads may call `predict` and `run` concurrently.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from attndeploy.errors import ConfigError, DataError, ModelError
from attndeploy.runtime import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TEXT_BYTES, sessions
from attndeploy.runtime.checks import check_inputs
from attndeploy.runtime.metadata import ModelMetadata, parse_metadata
from attndeploy.runtime.names import ATTENTION_MASK, GATES, INPUT_IDS, LOGITS, TAG_IDS
from attndeploy.runtime.text import Prediction, decode_batch, encode_texts
from attndeploy.runtime.tokenizer import TextTokenizer, pad_sequences

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
# What onnxruntime raises for a file it cannot load (none of them derives from RuntimeError).
_LOAD_ERRORS = (ort_state.Fail, ort_state.InvalidArgument, ort_state.NoSuchFile,
                ort_state.NoModel, ort_state.InvalidProtobuf, ort_state.InvalidGraph,
                ort_state.NotImplemented, ort_state.RuntimeException, ort_state.EPFail)


def stack_rows(arrays: list[np.ndarray]) -> np.ndarray:
    """Batches [B_i, ...] of one output as one array [sum B_i, ...]; a per-token output whose
    batches differ in length ([B_i, T_i, ...]) is right-padded with zeros to the longest T."""
    first = arrays[0]
    if all(a.shape[1:] == first.shape[1:] for a in arrays):
        return np.concatenate(arrays) if len(arrays) > 1 else first
    width = max(a.shape[1] for a in arrays)
    out = np.zeros((sum(len(a) for a in arrays), width, *first.shape[2:]), dtype=first.dtype)
    row = 0
    for array in arrays:
        out[row : row + len(array), : array.shape[1]] = array
        row += len(array)
    return out


class InferenceModel:
    """An exported attndeploy model loaded into onnxruntime (no torch).

    `providers`: onnxruntime execution providers, default CPU only. `threads`: intra-op threads
    (default: onnxruntime's, one per core). `session_options`: an `ort.SessionOptions` of your own
    (then `threads` must be left out). A file that is not an attndeploy export fails with an
    ModelError (an ExportError) saying so.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        providers: Sequence[str | tuple[str, dict]] | None = None,
        threads: int | None = None,
        session_options: ort.SessionOptions | None = None,
    ) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            inside = self.path / "model.onnx"
            hint = f" (did you mean {inside}?)" if inside.is_file() else ""
            raise ModelError(f"{self.path} is a folder; give the exported ONNX file{hint}")
        if not self.path.is_file():
            raise ModelError(f"no ONNX model at {self.path}")
        if threads is not None and session_options is not None:
            raise ConfigError("give threads or session_options, not both (set "
                              "intra_op_num_threads on your session options)")
        options = (session_options if session_options is not None
                   else sessions.session_options(threads=threads))
        try:
            self.session = sessions.create_session(
                self.path, options, providers=list(providers or DEFAULT_PROVIDERS)
            )
        except _LOAD_ERRORS as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"onnxruntime cannot load {self.path}: {first}") from exc
        meta = self.session.get_modelmeta().custom_metadata_map
        graph_outputs = [o.name for o in self.session.get_outputs()]
        self.metadata: ModelMetadata = parse_metadata(meta, str(self.path),
                                                      outputs=graph_outputs)
        self.output_names = [LOGITS, GATES] if self.metadata.gated else [LOGITS]
        if TAG_IDS in graph_outputs:  # a CRF tagger: its Viterbi path decides the tags
            self.output_names.append(TAG_IDS)
        inputs = sorted(i.name for i in self.session.get_inputs())
        outputs = {o.name for o in self.session.get_outputs()}
        if inputs != sorted([INPUT_IDS, ATTENTION_MASK]) or not set(self.output_names) <= outputs:
            raise ModelError(
                f"{self.path}: inputs {inputs} and outputs {sorted(outputs)} are not the "
                f"attndeploy interface ({INPUT_IDS}, {ATTENTION_MASK} -> "
                f"{', '.join(self.output_names)}); re-export the model."
            )

    # ------------------------------------------------------------------ what the model is

    @property
    def labels(self) -> tuple[str, ...]:
        return self.metadata.labels

    @property
    def tokenizer(self) -> TextTokenizer | None:
        return self.metadata.tokenizer

    @property
    def max_seq(self) -> int:
        return self.metadata.max_seq

    @property
    def variant(self) -> str:
        return self.metadata.variant

    @property
    def head(self) -> str:
        return self.metadata.head

    @property
    def gated(self) -> bool:
        return self.metadata.gated

    def __repr__(self) -> str:
        return (f"InferenceModel({str(self.path)!r}, variant={self.variant!r}, "
                f"head={self.head!r}, labels={len(self.labels)}, max_seq={self.max_seq})")

    # ------------------------------------------------------------------ running

    def predict(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncate: bool = False,
        progress: Callable[[int], None] | None = None,
        max_text_bytes: int | None = DEFAULT_MAX_TEXT_BYTES,
    ) -> list[Prediction]:
        """One Prediction per text, in input order.

        A text with no token or with more than `max_seq` tokens raises a DataError naming its
        index; with `truncate=True` a long text keeps its first `max_seq` tokens instead. A
        text of more than `max_text_bytes` UTF-8 bytes (None: no limit) is refused before it is
        tokenized, as a served text model refuses it.
        Texts run in batches of `batch_size` texts of similar length. `progress`, if given, is
        called after each batch with the number of texts it held.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise DataError(f"{self.path} holds no vocabulary (its checkpoint was saved without "
                            "a tokenizer), so it cannot read text; run token ids with .run()")
        encoded = encode_texts(tokenizer, texts, max_seq=self.max_seq, truncate=truncate,
                               max_bytes=max_text_bytes)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))  # stable
        if not order:
            return []
        # Run every batch first, then decode all rows at once: one softmax and one argmax over
        # [N, ...] instead of a few small numpy calls per batch (they dominate at batch 1).
        per_batch: list[list[np.ndarray]] = []
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            input_ids, attention_mask = pad_sequences([encoded[i].ids for i in rows])  # [B, T]
            per_batch.append(self.session.run(
                self.output_names, {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}
            ))
            if progress is not None:
                progress(len(rows))
        outputs = [stack_rows([arrays[k] for arrays in per_batch])
                   for k in range(len(self.output_names))]  # in `order`
        named = dict(zip(self.output_names, outputs, strict=True))
        decoded = decode_batch(named[LOGITS], named.get(GATES),
                               [encoded[i].tokens for i in order], self.labels,
                               family=self.metadata.runtime, tag_ids=named.get(TAG_IDS))
        results: list[Prediction | None] = [None] * len(encoded)
        for row, prediction in zip(order, decoded, strict=True):
            results[row] = prediction
        return results  # type: ignore[return-value]  # every slot is filled

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
        """The model's outputs by name for int64 [batch, seq] ids and mask (1 = real token).

        The inputs pass the served model's checks first (dtype, rank, shape, max_seq, mask 0/1,
        a real token per row, ids inside the vocabulary); a failure is a DataError.
        """
        check_inputs(input_ids, attention_mask, max_seq=self.max_seq,
                     vocab_size=self.metadata.vocab_size)
        arrays = self.session.run(
            self.output_names, {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}
        )
        return dict(zip(self.output_names, arrays, strict=True))
