"""What `quantize_model` does and the tolerances its int8 model must meet, validated up front."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.errors import ConfigError

METHODS = ("dynamic", "static", "best")
ACTIVATIONS = ("per-row", "per-batch")  # dynamic: one activation scale per token, or per batch
DEFAULT_ACTIVATIONS = "per-row"  # an answer that does not depend on its batch, as fp32's
DEFAULT_GRID = "1x8,4x32,8x128"  # batch x seq: one row, a few, a full batch at real length
# a model whose family makes its inputs (images, of the size its preprocessing records): batches
DEFAULT_BATCH_GRID = (1, 4, 16)


@dataclass(frozen=True)
class QuantizeOptions:
    """- `method`: `dynamic` (weights int8 per channel, activations quantized at run time: no
      calibration data needed), `static` (QDQ, activation ranges calibrated on the `--data`
      texts) or `best` (both, with data: the more accurate within the tolerances, then the
      faster).
    - `per_channel`: one scale per output channel of each weight (fp32 labels agreed on 98.8 %
      of 1,500 real texts per channel, 97.6 % per tensor, on all-MiniLM-L6-v2).
    - `reduce_range`: weights in 7 bits (onnxruntime's option for CPUs without VNNI, whose
      8-bit kernels can saturate). On such a CPU it kept the 99 % of labels for Evolving
      Attention-MiniLM with 3 blocks in fp32 (99.40 %), where 8 bits missed by a text with up to 5
      in fp32; for the standard MiniLM it kept no more (benchmarks/README.md, `real_speed.py`).
    - `exclude`: names of main-graph nodes (MatMul/Gemm) kept in fp32, e.g. from
      `attndeploy debug compare` ranking the layers int8 hurts most; `exclude_worst` N does that
      itself: it quantizes once, ranks the layers by the error each adds against fp32 on the
      shape grid (`attndeploy.debug.compare_models`), and quantizes again with the MatMuls of the
      N worst kept in fp32.
    - `gate_network_fp32`: a gated variant's gate network (GA-Net's, or the gate machinery a
      plug-in's spec names, `VariantSpec.gating`) stays in fp32 (its MatMuls join `exclude`),
      so the hard gates decide as in fp32: int8 moved the logits of the gates nearest the
      threshold across it (`quantizer.gate_network_matmuls`). Nothing changes for the ungated
      variants.
    - `activations` (dynamic, and `best`'s dynamic file): `per-row` (the default: None) gives
      each token its own activation scale (`per_row.per_row_activations`), so every answer is
      the same alone or in any batch, and the MiniLMs kept more labels (every variant, two
      seeds: 99.15-99.88 % with every block in int8, where per batch 1 of 8 kept 99 %;
      benchmarks/README.md, `quantize_sweep.py`); `per-batch` quantizes each MatMul's
      activations with one scale over the batch (onnxruntime's fused kernel: 1.1-1.6x faster
      per call in-process, 1-8 % more served throughput), so a text's answer moves with the
      texts batched with it and `loadtest` can check answers under load only at concurrency 1
      (benchmarks/README.md, `int8_batching.py`). `static` has fixed calibrated scales, so it
      takes neither.
    - Tolerances: the largest |logit change| on the shape grid (`max_logit_change`), and with
      texts the share of equal decisions (`min_agreement`: labels, or a tagger's tags) and,
      where the model's family scores its texts, the score lost (`max_accuracy_drop`: held-out
      accuracy). Outside any of them nothing is written.
    - Decoders (a text-generation export; `attndeploy.quantize.decoder`) are judged by what
      generation gives instead: greedy tokens of `prompts` prompts over `new_tokens` new tokens
      (`--data` texts' first `prompt_tokens` tokens, else random token ids), and with `--data`
      the teacher-forced perplexity of the texts. Tolerances: `max_perplexity_increase`, the
      relative perplexity increase int8 may add (default 5 %), and `min_token_agreement`, the
      share of greedy tokens identical to fp32's up to each prompt's first divergence (default
      0: reported, not judged, because one near-tie flip changes every token after it; set it
      to gate a model quantized without texts). The encoder-only options (`static`/`best`,
      `exclude_worst`, the shape grid and the label/accuracy/logit tolerances) are refused for
      a decoder, the decoder-only ones for an encoder.
    """

    method: str = "dynamic"
    per_channel: bool = True
    reduce_range: bool = False
    exclude: tuple[str, ...] = ()
    grid: str | None = None  # None: DEFAULT_GRID, each seq capped at the model's max_seq
    max_logit_change: float = 1.0
    min_agreement: float = 0.99
    max_accuracy_drop: float = 0.005
    exclude_worst: int = 0  # keep the MatMuls of the N layers int8 hurts most in fp32
    gate_network_fp32: bool = True  # GA-Net: the gate network's MatMuls stay fp32
    activations: str | None = None  # dynamic: None is per row (`dynamic_activations`)
    calibration_texts: int = 256  # static: how many of the --data texts calibrate
    threads: int | None = None
    seed: int = 0
    # decoders (text-generation exports) only
    prompts: int = 16  # greedy agreement: how many prompts
    new_tokens: int = 32  # ... and how many new tokens each
    prompt_tokens: int = 16  # ... of at most how many tokens (capped to fit the context)
    max_perplexity_increase: float = 0.05  # with --data: int8 ppl <= fp32 ppl * (1 + this)
    min_token_agreement: float = 0.0  # greedy tokens equal up to the first divergence
    force: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"unknown quantization method {self.method!r}; valid: "
                              f"{', '.join(METHODS)}")
        if self.activations is not None and self.activations not in ACTIVATIONS:
            raise ConfigError(f"unknown activation scaling {self.activations!r}; valid: "
                              f"{', '.join(ACTIVATIONS)}")
        if self.activations is not None and self.method == "static":
            raise ConfigError(f"--activations {self.activations} scales dynamic quantization's "
                              "activations; --method static calibrates fixed ones (QDQ), which "
                              "do not depend on the batch")
        if not self.max_logit_change > 0:
            raise ConfigError(f"--max-logit-change must be > 0, got {self.max_logit_change}")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ConfigError(f"--min-agreement must lie in [0, 1], got {self.min_agreement}")
        if not 0.0 <= self.max_accuracy_drop <= 1.0:
            raise ConfigError(
                f"--max-accuracy-drop must lie in [0, 1], got {self.max_accuracy_drop}")
        if self.exclude_worst < 0:
            raise ConfigError(f"--exclude-worst must be >= 0, got {self.exclude_worst}")
        if self.calibration_texts < 1:
            raise ConfigError(f"calibration_texts must be >= 1, got {self.calibration_texts}")
        for name in ("prompts", "new_tokens", "prompt_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got "
                                  f"{getattr(self, name)}")
        if not self.max_perplexity_increase >= 0:
            raise ConfigError("--max-perplexity-increase must be >= 0, got "
                              f"{self.max_perplexity_increase}")
        if not 0.0 <= self.min_token_agreement <= 1.0:
            raise ConfigError("--min-token-agreement must lie in [0, 1], got "
                              f"{self.min_token_agreement}")
        object.__setattr__(self, "exclude", tuple(self.exclude))

    def changed(self, names: tuple[str, ...]) -> list[str]:
        """Those of the fields `names` set to something other than their default."""
        defaults = QuantizeOptions()
        return [name for name in names if getattr(self, name) != getattr(defaults, name)]

    @property
    def dynamic_activations(self) -> str | None:
        """How the dynamic file scales its activations: `activations`, else per row; None for
        `static`, which makes no dynamic file."""
        if self.method == "static":
            return None
        return self.activations or DEFAULT_ACTIVATIONS
