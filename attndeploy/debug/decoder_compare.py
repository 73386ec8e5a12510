"""Two exported decoders (e.g. fp32 against its int8, or an export against a re-export) compared
step by step through the generation loop's own calls (`DecoderModel.step`), no PyTorch:

    report = compare_decoders("fp32.onnx", "int8.onnx", shape=(4, 9), steps=8)
    report.verdict         # first divergence: present.0.key at prefill; ...
    report.ranked()        # the layers whose cache error grows the most

Inputs: `shape` = B prompts of at most S tokens, random ids (`seed`) after `<bos>`, row r
`S - r * S // (2B)` long, left-padded (so padded rows are checked). Step 0 prefills both models
from the empty past; each decode step feeds both the token the reference chose greedily, so the
difference measured is numerical drift, not two diverged texts; each model carries its own
cache. Compared at each step: the logits of the real positions (prefill) or of the new token,
and every `present.*` entry over the real positions of its past axis (a bool entry, e.g. GA-Net's
key mask, by how many places differ), within the tolerance of the reference's dtype (fp32:
atol 1e-5, rtol 1e-4), or `DebugOptions`' atol/rtol. How often the candidate's own greedy choice
is the reference's is reported per step.

Refused before any work (ValidationError): a file that is not a text-generation export, two
decoders whose cache entries or vocabularies differ, a shape whose prompts plus `steps` do not
fit the context.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from attndeploy.debug.decoder_report import DecoderDebugReport, Difference, StepResult
from attndeploy.debug.options import DebugOptions, tolerances_for
from attndeploy.errors import AttnDeployError, ValidationError
from attndeploy.generation.loop import DecoderModel, left_pad, positions
from attndeploy.generation.metadata import StateEntry
from attndeploy.validate.compare import Tolerance

DEFAULT_STEPS = 8
DEFAULT_DECODER_SHAPE = (4, 9)  # prompts x the longest prompt


def load_decoder(path: Path | str, role: str, options: DebugOptions) -> DecoderModel:
    try:
        return DecoderModel(path, threads=options.threads,
                            **({"providers": options.providers} if options.providers else {}))
    except AttnDeployError as exc:
        raise ValidationError(f"{role}: {exc}") from None


def decoder_prompts(model: DecoderModel, shape: tuple[int, int], steps: int,
                    seed: int) -> list[list[int]]:
    """B random prompts of at most S tokens (module docstring); refused unless S + steps fits
    the context."""
    batch, seq = shape
    meta = model.metadata
    if batch < 1 or seq < 1 or steps < 0:
        raise ValidationError(f"shape {batch}x{seq} and {steps} steps: batch, prompt length "
                              "must be >= 1 and steps >= 0")
    if seq + steps > meta.max_seq:
        raise ValidationError(f"prompts of {seq} tokens plus {steps} decode steps are beyond "
                              f"the model's context of {meta.max_seq}")
    rng = np.random.default_rng(seed)
    allowed = np.setdiff1d(np.arange(meta.vocab_size),
                           [meta.bos_token_id, meta.eos_token_id, meta.pad_token_id])
    lengths = [max(1, seq - r * seq // (2 * batch)) for r in range(batch)]
    return [[meta.bos_token_id, *rng.choice(allowed, size=n - 1).tolist()] for n in lengths]


def _check_same(reference: DecoderModel, candidate: DecoderModel) -> None:
    a, b = reference.metadata, candidate.metadata
    problems = []
    if [(e.past, e.present, e.dtype) for e in a.state] != \
            [(e.past, e.present, e.dtype) for e in b.state]:
        problems.append("different cache entries")
    if a.vocab_size != b.vocab_size:
        problems.append(f"vocabularies of {a.vocab_size} and {b.vocab_size}")
    if problems:
        raise ValidationError(f"{reference.path} and {candidate.path} are not the same decoder: "
                              f"{'; '.join(problems)}")


def difference(got: np.ndarray, want: np.ndarray, tolerance: Tolerance) -> Difference:
    """`got` against `want` (same shape; bool: places that differ)."""
    if want.dtype == np.bool_:
        flips = int((got != want).sum())
        return Difference(float(flips > 0), flips / max(want.size, 1), flips == 0, flips)
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    delta = np.abs(got64 - want64)
    norm = float(np.linalg.norm(want64))
    rel = float(np.linalg.norm(got64 - want64)) / norm if norm else float(delta.max(initial=0))
    passed = bool((delta <= tolerance.atol + tolerance.rtol * np.abs(want64)).all())
    return Difference(float(delta.max(initial=0.0)), rel, passed)


def _real_past(entry: StateEntry, value: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`value` at the real positions of its past axis: [B, ..., T, ...] -> the real entries,
    flattened per row ([N]); the whole value when it has no past axis or another length."""
    axis = entry.past_axis
    if axis is None or value.shape[axis] != mask.shape[1]:
        return value.reshape(-1)
    moved = np.moveaxis(value, axis, 1)  # [B, T, ...]
    return moved[mask.astype(bool)].reshape(-1)  # [real tokens * rest]


def compare_decoders(reference_onnx: Path | str, candidate_onnx: Path | str,
                     options: DebugOptions | None = None, *,
                     shape: tuple[int, int] | None = None, steps: int = DEFAULT_STEPS,
                     seed: int = 0) -> DecoderDebugReport:
    """Compare `candidate_onnx` with `reference_onnx` step by step (module docstring)."""
    options = options or DebugOptions()
    started = time.perf_counter()
    reference = load_decoder(reference_onnx, "reference ONNX file", options)
    candidate = load_decoder(candidate_onnx, "ONNX file", options)
    _check_same(reference, candidate)
    entries = reference.metadata.state
    dtype = entries[0].dtype if entries and entries[0].dtype in ("float32", "float16") \
        else "float32"
    tolerance, _ = tolerances_for(options, dtype)
    if shape is None:
        batch, seq = DEFAULT_DECODER_SHAPE
        shape = (batch, max(1, min(seq, reference.metadata.max_seq - steps)))
    prompts = decoder_prompts(reference, shape, steps, seed)
    ids, mask = left_pad(prompts, reference.metadata.pad_token_id)  # [B, W]
    feed = (ids, mask, positions(mask))
    ref_state, cand_state = reference.empty_state(len(prompts)), candidate.empty_state(len(prompts))
    results: list[StepResult] = []
    for step in range(steps + 1):
        want, ref_state = reference.step(*feed, ref_state)
        got, cand_state = candidate.step(*feed, cand_state)
        real = feed[1][:, -want.shape[1]:].astype(bool)  # [B, n]: the new tokens that are real
        chosen = want[:, -1].argmax(-1)  # [B]
        state = {e.present: difference(_real_past(e, cand_state[e.past], mask),
                                       _real_past(e, ref_state[e.past], mask), tolerance)
                 for e in entries}
        results.append(StepResult(step, difference(got[real], want[real], tolerance), state,
                                  float((got[:, -1].argmax(-1) == chosen).mean())))
        mask = np.concatenate([mask, np.ones((len(prompts), 1), np.int64)], axis=1)  # [B, T+1]
        feed = (chosen[:, None].astype(np.int64), mask, positions(mask)[:, -1:])
    return DecoderDebugReport(
        str(reference_onnx), str(candidate_onnx), tolerance,
        (len(prompts), ids.shape[1]), results,
        timings={"total_s": round(time.perf_counter() - started, 3)})
