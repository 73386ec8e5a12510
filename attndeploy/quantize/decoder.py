"""`quantize` of a decoder (a text-generation export, issue #49): dynamic int8 with the same
quantizer as the encoders, judged by what generation gives.

The graph is quantized as an encoder's (`quantizer._quantize`: int8 weights per output channel,
activations quantized at run time, per row by default, so a prompt's tokens do not depend on the
prompts batched with it); the cache inputs and outputs are untouched (only MatMul/Gemm nodes with
a weight change), the metadata is copied (`quantizer._with_metadata`, which also checks that the
`attndeploy` functions survived), and the int8 file must load as a `DecoderModel` before it is
judged. The judgement, both models run by `DecoderModel`:

- greedy tokens (`GreedyCheck`): `prompts` prompts, the first `prompt_tokens` tokens of the
  `--data` texts (encoded with the model's tokenizer) or random token ids, continued greedily
  for `new_tokens` tokens by each model in left-padded batches. Reported: the share of tokens
  identical up to each prompt's first divergence (`prefix_agreement`, the tolerance's
  statistic), the share of positions identical overall, the prompts continued identically,
  each prompt's first divergence, and the largest prefill logit change;
- with `--data`, teacher-forced perplexity (`attndeploy.generation.perplexity`) of fp32 and int8
  on every text and its relative change (the tolerance `max_perplexity_increase`), and the
  teacher-forced next-token agreement.

Acceptance, in the encoders' style (`QuantizeOptions`): the file is written only within the
tolerances, else nothing is written and the command exits 1 naming what missed.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from attndeploy.errors import ConfigError, QuantizeError
from attndeploy.fsutil import (
    atomic_write_bytes,
    check_not_an_input,
    check_output_file,
    check_replaceable,
)
from attndeploy.generation import perplexity
from attndeploy.generation.loop import DecoderModel, left_pad, positions
from attndeploy.generation.metadata import is_decoder
from attndeploy.quantize import quantizer
from attndeploy.quantize.options import QuantizeOptions

GREEDY_BATCH = 8

# option field -> its CLI flag: those that mean something for one kind of model only
ENCODER_ONLY = {"method": "--method", "grid": "--shapes", "exclude_worst": "--exclude-worst",
                "max_logit_change": "--max-logit-change", "min_agreement": "--min-agreement",
                "max_accuracy_drop": "--max-accuracy-drop",
                "calibration_texts": "calibration_texts"}
DECODER_ONLY = {"prompts": "--prompts", "new_tokens": "--new-tokens",
                "prompt_tokens": "--prompt-tokens",
                "max_perplexity_increase": "--max-perplexity-increase",
                "min_token_agreement": "--min-token-agreement"}


def is_decoder_file(path: Path) -> bool:
    """Whether `path` is a text-generation export (by its metadata; False for anything
    unreadable, which the encoder path then refuses with its own message)."""
    if not path.is_file():
        return False
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # protobuf raises DecodeError and others
        return False
    return is_decoder({p.key: p.value for p in model.metadata_props})


def refuse_options(options: QuantizeOptions, *, decoder: bool, source: Path) -> None:
    """One ConfigError naming the options given that do not apply to this kind of model."""
    wrong = ENCODER_ONLY if decoder else DECODER_ONLY
    given = options.changed(tuple(wrong))
    if not given:
        return
    flags = ", ".join(f"{wrong[name]} {_shown(getattr(options, name))}" for name in given)
    if decoder:
        raise ConfigError(f"{flags}: encoder-only; {source} is a decoder (text-generation), "
                          "quantized dynamically and judged by greedy tokens and perplexity "
                          "(--prompts, --new-tokens, --max-perplexity-increase, "
                          "--min-token-agreement)")
    raise ConfigError(f"{flags}: decoder-only (text generation); {source} is an encoder, "
                      "judged by its logits and labels (--max-logit-change, --min-agreement, "
                      "--max-accuracy-drop)")


def _shown(value: Any) -> str:
    return str(value) if not isinstance(value, tuple) else ",".join(value)


# ----------------------------------------------------------------------------- the checks


@dataclass
class GreedyCheck:
    source: str  # "data" (the --data texts' first tokens) or "random" (random token ids)
    prompts: int
    prompt_tokens: int  # the longest prompt
    new_tokens: int
    tokens: int  # compared: per prompt the longer of the two continuations
    prefix_agreement: float  # tokens identical up to each prompt's first divergence / tokens
    token_agreement: float  # positions identical anywhere / tokens
    identical_prompts: int  # prompts continued identically
    first_divergence: list[int | None]  # per prompt the first differing new token, or None
    max_prefill_logit_change: float  # largest |logit change| over the prompts' real tokens


@dataclass
class PerplexityCheck:
    file: str
    texts: int
    tokens: int  # scored tokens
    fp32_perplexity: float
    int8_perplexity: float
    next_token_agreement: float  # teacher-forced argmax equal

    @property
    def relative_change(self) -> float:
        return self.int8_perplexity / self.fp32_perplexity - 1.0


def greedy_prompts(model: DecoderModel, options: QuantizeOptions,
                   texts: list[str] | None) -> tuple[list[list[int]], str]:
    """The prompts of the greedy check and where they came from (module docstring). Each is at
    most `prompt_tokens` long and leaves room for `new_tokens` in the context."""
    meta = model.metadata
    room = meta.max_seq - options.new_tokens
    if room < 1:
        raise ConfigError(f"--new-tokens {options.new_tokens} leaves no room for a prompt in "
                          f"the model's context of {meta.max_seq}")
    longest = min(options.prompt_tokens, room)
    if texts is not None:
        rows = perplexity.encode_for_scoring(model, texts[: options.prompts], longest)
        return rows, "data"
    rng = np.random.default_rng(options.seed)
    allowed = np.setdiff1d(np.arange(meta.vocab_size),
                           [meta.eos_token_id, meta.pad_token_id, meta.bos_token_id])
    lengths = rng.integers(max(1, longest // 2), longest + 1, size=options.prompts)
    return [[meta.bos_token_id, *rng.choice(allowed, size=int(n) - 1).tolist()]
            for n in lengths], "random"


def compare_greedy(fp32: DecoderModel, int8: DecoderModel, prompts: list[list[int]],
                   new_tokens: int, source: str) -> GreedyCheck:
    """Both models' greedy continuations of `prompts` (in left-padded batches), compared."""
    tokens = prefix = same = identical = 0
    divergence: list[int | None] = []
    largest = 0.0
    for start in range(0, len(prompts), GREEDY_BATCH):
        chunk = prompts[start:start + GREEDY_BATCH]
        ids, mask = left_pad(chunk, fp32.metadata.pad_token_id)  # [B, W]
        want, _ = fp32.step(ids, mask, positions(mask), fp32.empty_state(len(chunk)))
        got, _ = int8.step(ids, mask, positions(mask), int8.empty_state(len(chunk)))
        real = mask.astype(bool)  # [B, W]
        largest = max(largest, float(np.abs(want[real] - got[real]).max()))
        for a, b in zip(fp32.generate_ids(chunk, new_tokens),
                        int8.generate_ids(chunk, new_tokens), strict=True):
            length = max(len(a), len(b))
            equal = [i < len(a) and i < len(b) and a[i] == b[i] for i in range(length)]
            first = next((i for i, e in enumerate(equal) if not e), None)
            tokens += length
            same += sum(equal)
            prefix += length if first is None else first
            identical += first is None
            divergence.append(first)
    return GreedyCheck(source, len(prompts), max(len(p) for p in prompts), new_tokens, tokens,
                       prefix / tokens if tokens else 1.0, same / tokens if tokens else 1.0,
                       identical, divergence, largest)


def compare_perplexity(fp32: DecoderModel, int8: DecoderModel, texts: list[str],
                       file: str) -> PerplexityCheck:
    rows = perplexity.encode_for_scoring(fp32, texts)
    before, after = perplexity.score(fp32, rows), perplexity.score(int8, rows)
    return PerplexityCheck(file, len(rows), before.tokens, before.perplexity, after.perplexity,
                           perplexity.next_token_agreement(before, after))


# ----------------------------------------------------------------------------- the result


@dataclass
class DecoderCandidate:
    method: str
    greedy: GreedyCheck
    perplexity: PerplexityCheck | None
    size_bytes: int
    quantized_nodes: int
    excluded: list[str] = field(default_factory=list)
    gate_network: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        ppl = self.perplexity
        return {"method": self.method, "passed": self.passed, "failures": self.failures,
                "greedy": asdict(self.greedy),
                "perplexity": (asdict(ppl) | {"relative_change": ppl.relative_change}
                               if ppl else None),
                "size_bytes": self.size_bytes, "quantized_nodes": self.quantized_nodes,
                "excluded": self.excluded, "gate_network": self.gate_network}


def _failures(candidate: DecoderCandidate, options: QuantizeOptions) -> list[str]:
    found = []
    ppl, greedy = candidate.perplexity, candidate.greedy
    if ppl is not None and ppl.relative_change > options.max_perplexity_increase:
        found.append(f"perplexity {ppl.fp32_perplexity:.4g} -> {ppl.int8_perplexity:.4g} "
                     f"({ppl.relative_change:+.2%}) > +{options.max_perplexity_increase:.2%}")
    if greedy.prefix_agreement < options.min_token_agreement:
        found.append(f"greedy tokens equal up to the first divergence "
                     f"{greedy.prefix_agreement:.2%} < {options.min_token_agreement:.2%}")
    return found


@dataclass
class DecoderQuantizeResult:
    source: Path
    out: Path
    options: QuantizeOptions
    candidates: list[DecoderCandidate]
    chosen: DecoderCandidate | None
    source_bytes: int

    @property
    def passed(self) -> bool:
        return self.chosen is not None

    def to_dict(self) -> dict[str, Any]:
        return {"source": str(self.source), "out": str(self.out), "written": self.passed,
                "family": "text-generation",
                "method": self.chosen.method if self.chosen else None,
                "options": asdict(self.options) | {
                    "activations": self.options.dynamic_activations},
                "source_bytes": self.source_bytes,
                "candidates": [c.to_dict() for c in self.candidates]}

    def raise_for_failure(self) -> None:
        if self.chosen is None:
            reasons = "; ".join(", ".join(c.failures) for c in self.candidates)
            raise QuantizeError(f"the int8 decoder is not within the tolerances, nothing "
                                f"written ({reasons}); try --exclude with the MatMuls of the "
                                "layers `attndeploy debug compare` ranks worst")


# ----------------------------------------------------------------------------- the work


def quantize_decoder(source: Path, out: Path, options: QuantizeOptions,
                     data: Path | None) -> DecoderQuantizeResult:
    """Quantize the decoder `source` to `out` and judge it (module docstring)."""
    from attndeploy.validate.families import read_texts

    refuse_options(options, decoder=True, source=source)
    fp32 = DecoderModel(source, threads=options.threads)
    check_output_file(out)
    check_not_an_input(out, [source] + ([data] if data is not None else []))
    check_replaceable(out, force=options.force, error=QuantizeError)
    texts = read_texts(data) if data is not None else None
    if texts is not None and fp32.tokenizer is None:
        perplexity.encode_for_scoring(fp32, texts)  # the clear "no tokenizer" line
    prompts, origin = greedy_prompts(fp32, options, texts)
    proto = onnx.load(str(source))
    gate_network = (quantizer.gate_network_matmuls(proto)
                    if options.gate_network_fp32 else [])
    used = replace(options, exclude=quantizer._joined(options.exclude, gate_network))
    with tempfile.TemporaryDirectory(prefix="attndeploy-quantize-") as scratch:
        private = quantizer._private_copy(proto, Path(scratch))
        target = Path(scratch) / "dynamic.onnx"
        quantizer._quantize("dynamic", private, target, used, None, shown=source)
        record = {"method": "dynamic", "per_channel": options.per_channel,
                  "reduce_range": options.reduce_range,
                  "activations": options.dynamic_activations, "exclude": list(used.exclude),
                  "gate_network": gate_network}
        blob = quantizer._with_metadata(target, proto, record)
        target.write_bytes(blob)
        int8 = DecoderModel(target, threads=options.threads)
        if _signature(int8) != _signature(fp32):
            raise QuantizeError("quantization changed the decoder's inputs or outputs (the "
                                "cache); re-export the model")
        candidate = DecoderCandidate(
            "dynamic", compare_greedy(fp32, int8, prompts, options.new_tokens, origin),
            compare_perplexity(fp32, int8, texts, str(data)) if texts is not None else None,
            len(blob), quantizer._count_quantized(blob), excluded=list(used.exclude),
            gate_network=gate_network)
    candidate.failures = _failures(candidate, options)
    chosen = candidate if candidate.passed else None
    if chosen is not None:
        atomic_write_bytes(out, blob)
    return DecoderQuantizeResult(source, out, options, [candidate], chosen,
                                 source.stat().st_size)


def _signature(model: DecoderModel) -> list[tuple[str, str]]:
    """The graph's inputs and outputs, names and element types (the cache among them)."""
    session = model.session
    return [(v.name, v.type) for v in (*session.get_inputs(), *session.get_outputs())]


def record_of(path: Path) -> dict[str, Any]:
    """The `attndeploy.quantization` record of a quantized file (for tests and reports)."""
    from attndeploy.runtime.names import META_QUANTIZATION

    model = onnx.load(str(path), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    return json.loads(meta[META_QUANTIZATION])
