"""Validate an exported translation model against its checkpoint (issue #51):

- `incremental`: decoding one target token at a time with the cache (self-attention K/V, the
  variant's own state, Evolving Attention's self and cross rows) gives the logits of one full
  pass over the target (PyTorch, teacher-forced on the greedy output);
- `onnx_steps`: at every greedy step, onnxruntime's logits equal PyTorch's (each run carries
  its own state), and the encoder's cross mask is the same;
- `beams`: beam search (4 beams, length penalty 1) gives the same tokens in PyTorch and in
  onnxruntime for every source: the checkpoint's recorded held-out sources (`data.
  held_out_sources`, written by training), else a few fixed German sentences.

The report is `attndeploy.validate.decoder`'s (`DecoderReport` of `DecoderCheck`s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from attndeploy.generation.seq2seq import beam_search, greedy, pad_sources
from attndeploy.generation.seq2seq_onnx import OnnxSeq2Seq
from attndeploy.models.seq2seq.backend import TorchSeq2Seq
from attndeploy.models.seq2seq.model import Seq2Seq
from attndeploy.validate.decoder import DecoderCheck, DecoderReport

ATOL = 1e-4
FALLBACK_SOURCES = ("Das ist doch nicht möglich.", "Die Datei konnte nicht geöffnet werden.",
                    "Er kommt morgen mit dem Zug.", "Speichern unter")


def check_incremental(model: Seq2Seq, sources: list[list[int]], atol: float) -> DecoderCheck:
    backend = TorchSeq2Seq(model)
    targets = [[backend.bos_id, *t.ids][:model.config.max_target]
               for t in greedy(backend, sources)]
    ids, mask = pad_sources(sources, backend.pad_id)
    target_ids, _ = pad_sources(targets, backend.pad_id)
    worst = 0.0
    with torch.no_grad():
        memory = model.encode(torch.from_numpy(ids), torch.from_numpy(mask))
        full, _ = model.decode(torch.from_numpy(target_ids), memory, model.cross_state(memory))
        state = {**model.cross_state(memory), **model.empty_self_state(len(sources))}
        for t in range(target_ids.shape[1]):
            logits, present = model.decode(torch.from_numpy(target_ids[:, t:t + 1]), memory,
                                           state, torch.full((len(sources), 1), t))
            state.update(present)
            worst = max(worst, float((logits[:, 0] - full[:, t]).abs().max()))
    return DecoderCheck("incremental", worst <= atol, worst, atol,
                        f"{len(sources)} sources, {target_ids.shape[1]} target positions")


def check_onnx_steps(model: Seq2Seq, onnx: OnnxSeq2Seq, sources: list[list[int]], atol: float
                     ) -> DecoderCheck:
    backend = TorchSeq2Seq(model)
    ids, mask = pad_sources(sources, backend.pad_id)
    torch_mask, torch_state = backend.encode(ids, mask)
    onnx_mask, onnx_state = onnx.encode(ids, mask)
    if not np.array_equal(torch_mask, onnx_mask):
        return DecoderCheck("onnx_steps", False, 1.0, 0.0, "the encoders' cross masks differ")
    tokens = np.full((len(sources), 1), backend.bos_id, dtype=np.int64)
    worst, steps = 0.0, 0
    for position in range(model.config.max_target):
        at = np.full((len(sources), 1), position, dtype=np.int64)
        want, torch_state = backend.step(tokens, at, torch_mask, torch_state)
        got, onnx_state = onnx.step(tokens, at, onnx_mask, onnx_state)
        worst, steps = max(worst, float(np.abs(got - want).max())), steps + 1
        tokens = want.argmax(-1)[:, None].astype(np.int64)
        if (tokens == backend.eos_id).all():
            break
    return DecoderCheck("onnx_steps", worst <= atol, worst, atol,
                        f"{len(sources)} sources, {steps} greedy steps")


def check_beams(model: Seq2Seq, onnx: OnnxSeq2Seq, sources: list[list[int]], num_beams: int
                ) -> DecoderCheck:
    backend = TorchSeq2Seq(model)
    differing = [i for i, s in enumerate(sources)
                 if beam_search(backend, s, num_beams).ids != beam_search(onnx, s, num_beams).ids]
    detail = f"{len(sources)} sources, {num_beams} beams"
    if differing:
        detail += f"; differ on sources {differing[:5]}"
    return DecoderCheck("beams", not differing, float(len(differing)), 0.0, detail)


def validate_seq2seq(model: Seq2Seq, export: Path, texts: list[str], *, atol: float = ATOL,
                     num_beams: int = 4) -> DecoderReport:
    onnx = OnnxSeq2Seq(export)
    sources = [onnx.source_ids(text) for text in texts]
    return DecoderReport([check_incremental(model, sources, atol),
                          check_onnx_steps(model, onnx, sources, atol),
                          check_beams(model, onnx, sources, num_beams)])


def validate_checkpoint(checkpoint: Path, export: Path, **options: Any) -> DecoderReport:
    """`attndeploy validate CKPT EXPORT_FOLDER` for a translation model (`seed` is unused:
    the sources are the checkpoint's held-out ones)."""
    from attndeploy.models.seq2seq.checkpoint import load_seq2seq

    loaded = load_seq2seq(Path(checkpoint))
    export = Path(export)
    if export.is_file():  # the decoder file given: its folder
        export = export.parent
    texts = list(loaded.raw.get("data", {}).get("held_out_sources") or FALLBACK_SOURCES)
    return validate_seq2seq(loaded.model, export, texts, atol=options.get("atol", ATOL))
