"""An exported translation model in onnxruntime (`attndeploy.export.seq2seq` writes the folder):
a `Seq2SeqBackend` of the torch-free loop (`attndeploy.generation.seq2seq`), and `translate`.

The state it carries is the decoder's metadata list (`attndeploy.decoder_state`): the encoder's
outputs become the constant cross inputs (`present.{l}.encoder.*` -> `past_key_values.{l}.
encoder.*`), the self-attention cache starts empty (0 along "past"), and each step's present
outputs replace their past inputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ModelError
from attndeploy.generation.metadata import (
    DTYPES,
    META_FAMILY,
    META_GENERATION,
    META_STATE,
    META_TOKENIZER,
    META_VARIANT,
)
from attndeploy.generation.seq2seq import State, Translation, beam_search, greedy

ENCODER_FILE, DECODER_FILE = "encoder_model.onnx", "decoder_model.onnx"
TARGET_MASK = "decoder_attention_mask"  # the decoder's mask over cached + new target tokens
FAMILY = "translation"


def _session(path: Path, threads: int | None):
    from attndeploy.runtime.sessions import create_session

    if not path.is_file():
        raise ModelError(f"{path}: no such ONNX file (an exported translation model is a "
                         f"folder with {ENCODER_FILE} and {DECODER_FILE})")
    try:
        return create_session(path, threads=threads or None)
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelError(f"{path}: onnxruntime cannot load it "
                         f"({str(exc).splitlines()[0][:200]})") from None


def is_translation_export(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / DECODER_FILE).is_file()


class OnnxSeq2Seq:
    """The exported encoder and decoder as a `Seq2SeqBackend`, and `translate(texts)`."""

    def __init__(self, folder: Path | str, *, threads: int | None = None) -> None:
        from attndeploy.generation.tokenizer import tokenizer_from_record

        self.folder = Path(folder)
        self.encoder = _session(self.folder / ENCODER_FILE, threads)
        self.decoder = _session(self.folder / DECODER_FILE, threads)
        meta = self.decoder.get_modelmeta().custom_metadata_map
        if meta.get(META_FAMILY) != FAMILY:
            raise ModelError(f"{self.folder}: not an exported translation model (family "
                             f"{meta.get(META_FAMILY)!r})")
        try:
            generation = json.loads(meta[META_GENERATION])
            self.state_specs: list[dict[str, Any]] = json.loads(meta[META_STATE])
            self.tokenizer = tokenizer_from_record(json.loads(meta[META_TOKENIZER]))
        except (KeyError, ValueError, TypeError) as exc:
            raise ModelError(f"{self.folder}: unreadable translation metadata ({exc})") from None
        self.variant = meta.get(META_VARIANT, "?")
        self.bos_id, self.eos_id = generation["bos_token_id"], generation["eos_token_id"]
        self.pad_id, self.max_target = generation["pad_token_id"], generation["max_target"]
        self.max_source = generation["max_source"]
        self.decoder_outputs = [o.name for o in self.decoder.get_outputs()]
        # Exports before the served batch (issue #51, slice 4) have no target mask input.
        self.takes_target_mask = TARGET_MASK in {i.name for i in self.decoder.get_inputs()}

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray
               ) -> tuple[np.ndarray, State]:
        names = [o.name for o in self.encoder.get_outputs()]
        outputs = dict(zip(names, self.encoder.run(None, {"input_ids": input_ids,
                                                          "attention_mask": attention_mask}),
                           strict=True))
        batch = input_ids.shape[0]
        state: State = {}
        for spec in self.state_specs:
            present = "present." + spec["past"][len("past_key_values."):]
            if present in outputs:  # the cross keys, values, rows: the encoder made them
                state[spec["past"]] = outputs[present]
            else:  # the self-attention cache before any target token
                shape = tuple(batch if d == "batch" else 0 if d == "past" else int(d)
                              for d in spec["dims"])
                state[spec["past"]] = np.zeros(shape, dtype=DTYPES[spec["dtype"]])
        return outputs["encoder_attention_mask"], state

    def step(self, input_ids: np.ndarray, position_ids: np.ndarray, memory_mask: np.ndarray,
             state: State) -> tuple[np.ndarray, State]:
        feed = {"input_ids": input_ids, "position_ids": position_ids,
                "encoder_attention_mask": memory_mask, **state}
        if self.takes_target_mask:  # every row at the same step: all P+n target tokens real
            width = int(position_ids[0, -1]) + 1
            feed[TARGET_MASK] = np.ones((input_ids.shape[0], width), dtype=np.int64)
        outputs = dict(zip(self.decoder_outputs, self.decoder.run(None, feed), strict=True))
        changed = {spec["past"]: outputs[spec["present"]] for spec in self.state_specs
                   if spec["present"] is not None}
        return outputs["logits"][:, -1], {**state, **changed}

    def source_ids(self, text: str) -> list[int]:
        if not text.strip():
            raise DataError("the source sentence is empty")
        ids = self.tokenizer.encode(text, bos=False)[:self.max_source - 1]
        return [*ids, self.eos_id]

    def translate(self, texts: Sequence[str], *, num_beams: int = 1,
                  length_penalty: float = 1.0, max_new_tokens: int | None = None
                  ) -> list[tuple[str, Translation]]:
        """Each text's translation and its ids and score: greedy (num_beams 1, the batch at
        once) or beam search (one source at a time)."""
        sources = [self.source_ids(text) for text in texts]
        if num_beams == 1:
            results = greedy(self, sources, max_new_tokens)
        else:
            results = [beam_search(self, s, num_beams, length_penalty, max_new_tokens)
                       for s in sources]
        return [(self.tokenizer.decode(r.ids), r) for r in results]
