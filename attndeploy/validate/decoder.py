"""Validate a causal language model and its export with the cache (issue #49).

Three checks, every result collected, then one verdict (`DecoderReport` is truthy when all
passed):

- `incremental`: PyTorch decoding with the cache (a prefill, then one token a step) gives the
  logits of a full recomputation over every token, at every real position (<= 1e-5);
- `onnx_steps`: for each prompt length and batch size of the grid (left-padded prompts of
  different lengths), onnxruntime gives PyTorch's logits and present state on the prefill and
  on each of `decode_steps` decode steps (<= `atol`), both fed the same tokens;
- `greedy`: greedy decoding in PyTorch and by the in-process loop over the ONNX file
  (`attndeploy.generation`) choose identical tokens for `new_tokens` steps (64 unless the
  context is shorter).

Errors are scaled to the size of what is compared: |got − want| / max(1, max |want|) (the
largest logit, or state entry, at least 1). A small model's logits are below 1, so its bounds
are absolute; a 30-layer pretrained model's logits reach ~25, and float32 rounding through its
layers moves them by ~1e-4 absolute (SmolLM2-135M: 1.0e-4 with the cache against without, 2e-4
onnxruntime against PyTorch), a few 1e-6 of their size.

Letters: B batch, W prompt width, T tokens seen, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attndeploy.generation.loop import DecoderModel, left_pad, positions
from attndeploy.models.decoder.model import CausalLM

INCREMENTAL_TOLERANCE = 1e-5
ONNX_TOLERANCE = 1e-4
PROMPT_LENGTHS = (1, 5, 12)
BATCH_SIZES = (1, 3)
DECODE_STEPS = 8
NEW_TOKENS = 64


@dataclass
class DecoderCheck:
    """One check's verdict: the largest error seen (or mismatches), its bound, what it ran."""

    name: str
    passed: bool
    max_error: float
    tolerance: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "max_error": self.max_error,
                "tolerance": self.tolerance, "detail": self.detail}


@dataclass
class DecoderReport:
    """Named checks, each passed or failed; `failure()` is the one line a failed run prints."""

    checks: list[DecoderCheck] = field(default_factory=list)
    KIND = "decoder"  # the model the report is of, in its failure line

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [c.to_dict() for c in self.checks]}

    def failure(self) -> str:
        failed = [c for c in self.checks if not c.passed]
        if not failed:
            return ""
        first = failed[0]
        return (f"{self.KIND} validation failed ({len(failed)} check(s); first: {first.name}, "
                f"error {first.max_error:.3g} > {first.tolerance:g}: {first.detail})")


def _prompts(vocab: int, batch: int, length: int, seed: int) -> list[list[int]]:
    """`batch` prompts of `length`, `length`-1, ... tokens (at least 1): left padding varies."""
    rng = np.random.default_rng(seed)
    first = min(4, vocab - 1)  # past the special tokens where the vocabulary has them
    return [[2 % vocab] + rng.integers(first, vocab, max(length - b, 1) - 1).tolist()
            for b in range(batch)]


@torch.no_grad()
def _torch_step(model: CausalLM, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray,
                state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(pos), state)


def _real_error(got: np.ndarray, want: np.ndarray, mask: np.ndarray) -> float:
    """max |got - want| [B, n, V] over the rows' real positions (mask [B, n]), scaled by the
    largest |want| there (at least 1: the module docstring)."""
    real = mask[:, :, None] != 0
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64)) * real
    if not diff.size:
        return 0.0
    return float(diff.max()) / max(1.0, float((np.abs(want) * real).max()))


def check_incremental(model: CausalLM, *, seed: int = 0,
                      lengths: tuple[int, ...] = PROMPT_LENGTHS, batch: int = 3,
                      steps: int = DECODE_STEPS) -> DecoderCheck:
    model.eval()
    worst = 0.0
    for length in lengths:
        length = min(length, model.config.max_seq - steps)
        rows = _prompts(model.config.vocab_size, batch, length + steps, seed + length)
        ids, mask = left_pad(rows, 0)  # [B, W + steps]
        width = ids.shape[1] - steps
        full, _ = _torch_step(model, ids, mask, positions(mask), model.empty_state(batch))
        parts = []
        logits, state = _torch_step(model, ids[:, :width], mask[:, :width],
                                    positions(mask)[:, :width], model.empty_state(batch))
        parts.append(logits)
        for t in range(width, ids.shape[1]):
            logits, state = _torch_step(model, ids[:, t:t + 1], mask[:, :t + 1],
                                        positions(mask[:, :t + 1])[:, -1:], state)
            parts.append(logits)
        incremental = torch.cat(parts, dim=1).numpy()  # [B, T, V]
        worst = max(worst, _real_error(incremental, full.numpy(), mask))
    return DecoderCheck("incremental", worst <= INCREMENTAL_TOLERANCE, worst,
                        INCREMENTAL_TOLERANCE,
                        f"prompt lengths {list(lengths)}, batch {batch}, {steps} steps")


def check_onnx_steps(model: CausalLM, onnx: DecoderModel, *, seed: int = 0,
                     lengths: tuple[int, ...] = PROMPT_LENGTHS,
                     batches: tuple[int, ...] = BATCH_SIZES, steps: int = DECODE_STEPS,
                     atol: float = ONNX_TOLERANCE) -> DecoderCheck:
    worst, where = 0.0, ""
    for batch in batches:
        for length in lengths:
            length = min(length, model.config.max_seq - steps)
            ids, mask = left_pad(_prompts(model.config.vocab_size, batch, length, seed), 0)
            pos = positions(mask)
            want, t_state = _torch_step(model, ids, mask, pos, model.empty_state(batch))
            got, o_state = onnx.step(ids, mask, pos, onnx.empty_state(batch))
            errors = [_real_error(got, want.numpy(), mask)]
            seen = mask
            for step in range(steps + 1):
                errors += [_state_error(o_state[name], t_state[name]) for name in t_state]
                if step == steps:
                    break
                token = want[:, -1].argmax(-1).numpy()[:, None].astype(np.int64)  # [B, 1]
                seen = np.concatenate([seen, np.ones((batch, 1), np.int64)], axis=1)
                step_pos = positions(seen)[:, -1:]
                want, t_state = _torch_step(model, token, seen, step_pos, t_state)
                got, o_state = onnx.step(token, seen, step_pos, o_state)
                errors.append(_real_error(got, want.numpy(), np.ones((batch, 1))))
            if max(errors) > worst:
                worst, where = max(errors), f"batch {batch}, prompt {length}"
    detail = (f"prompt lengths {list(lengths)} x batch sizes {list(batches)}, prefill + {steps} "
              f"decode steps" + (f"; worst at {where}" if where else ""))
    return DecoderCheck("onnx_steps", worst <= atol, worst, atol, detail)


def _state_error(got: np.ndarray, want: torch.Tensor) -> float:
    if tuple(got.shape) != tuple(want.shape):
        return float("inf")
    if not want.numel():
        return 0.0
    want_array = want.double().numpy()
    diff = float(np.abs(got.astype(np.float64) - want_array).max())
    return diff / max(1.0, float(np.abs(want_array).max()))


@torch.no_grad()
def torch_greedy(model: CausalLM, prompts: list[list[int]], new_tokens: int,
                 eos_id: int) -> list[list[int]]:
    """PyTorch's greedy continuation of each prompt with the cache (until <eos>, exclusive)."""
    batch = len(prompts)
    ids, mask = left_pad(prompts, 0)
    logits, state = _torch_step(model, ids, mask, positions(mask), model.empty_state(batch))
    out: list[list[int]] = [[] for _ in range(batch)]
    done = np.zeros(batch, dtype=bool)
    for index in range(new_tokens):
        token = logits[:, -1].argmax(-1).numpy().astype(np.int64)  # [B]
        token = np.where(done, eos_id, token)
        done |= token == eos_id
        for b in np.flatnonzero(~done):
            out[b].append(int(token[b]))
        if done.all() or index == new_tokens - 1:
            break
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        logits, state = _torch_step(model, token[:, None], mask, positions(mask)[:, -1:], state)
    return out


def check_greedy(model: CausalLM, onnx: DecoderModel, *, seed: int = 0,
                 new_tokens: int = NEW_TOKENS, batch: int = 3,
                 prompt_length: int = 5) -> DecoderCheck:
    new_tokens = min(new_tokens, model.config.max_seq - prompt_length)
    prompts = _prompts(model.config.vocab_size, batch, prompt_length, seed + 1)
    eos = onnx.metadata.eos_token_id
    want = torch_greedy(model, prompts, new_tokens, eos)
    got = onnx.generate_ids(prompts, new_tokens)
    mismatched = sum(a != b for a, b in zip(want, got, strict=True))
    return DecoderCheck("greedy", mismatched == 0, float(mismatched), 0.0,
                        f"{batch} prompts, {new_tokens} new tokens; rows that differ: "
                        f"{mismatched}")


def validate_decoder(model: CausalLM, onnx_file: Path, *, seed: int = 0,
                     lengths: tuple[int, ...] = PROMPT_LENGTHS,
                     batches: tuple[int, ...] = BATCH_SIZES, steps: int = DECODE_STEPS,
                     new_tokens: int = NEW_TOKENS, atol: float = ONNX_TOLERANCE
                     ) -> DecoderReport:
    """Every check of the module docstring, collected (none raises for a mismatch)."""
    model.eval()
    onnx = DecoderModel(onnx_file)
    return DecoderReport([
        check_incremental(model, seed=seed, lengths=lengths, steps=steps),
        check_onnx_steps(model, onnx, seed=seed, lengths=lengths, batches=batches,
                         steps=steps, atol=atol),
        check_greedy(model, onnx, seed=seed, new_tokens=new_tokens),
    ])


def validate_checkpoint(checkpoint: Path, onnx_file: Path, **options: Any) -> DecoderReport:
    """`validate_decoder` of a decoder checkpoint's model."""
    from attndeploy.models.decoder.checkpoint import load_decoder

    return validate_decoder(load_decoder(Path(checkpoint)).model, Path(onnx_file), **options)
