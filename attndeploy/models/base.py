"""What every model family shares: the forward contract and the gate bookkeeping.

forward(input_ids [B,T] int64, attention_mask [B,T] int64) -> dict with
  "logits": the family's head's: [B, C] (classification) or [B, T, C] (tagging),
  "gates": bool [B, T] (gated variants, e.g. GA-Net; hard gates, also reported in training),
and, with details=True (training and evaluation), "density_penalty" (GA-Net training) and
"gate_logits" (GA-Net: the logits the gates were decided on; s + noise in `sample` mode).
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor, nn

from attndeploy.config import ModelConfig
from attndeploy.errors import ConfigError
from attndeploy.models.families import training_part
from attndeploy.models.inputs import check_model_inputs
from attndeploy.variants.api import GateState, soft_density
from attndeploy.variants.functional import hard_gates
from attndeploy.variants.registry import variant_spec


def _check_layer_span(config: ModelConfig) -> None:
    """The spec's `layer_span` option keeps the lowest layers of a converted Hugging Face model as
    they were (docs/variants.md §7); attndeploy's own models run the variant in every layer."""
    spec = variant_spec(config.variant)
    if spec.layer_span is None:
        return
    span = getattr(getattr(config, config.variant), spec.layer_span)
    if span != "all":
        raise ConfigError(f"{spec.layer_span}={span!r} applies to converted Hugging Face models "
                          f"(train --hf-model); attndeploy's own models run {spec.title} in "
                          "every layer: leave it at 'all'")


class AttnModel(nn.Module):
    """Base class: input checks outside tracing, and the variant's gates (its spec's gate
    machinery, attndeploy/variants/_gating.py) once per forward pass."""

    def __init__(self, config: ModelConfig, embed_dim: int) -> None:
        super().__init__()
        self.config = config
        spec = variant_spec(config.variant)
        _check_layer_span(config)
        self.gates = spec.gating_class()(embed_dim, config) if spec.gated else None

    @property
    def family_part(self) -> ModuleType:
        """The training part of the model's family (`config.head`): each architecture builds
        its head with its `build_head` and applies it with `apply_head`."""
        return training_part(self.config.head)

    @property
    def is_gated(self) -> bool:
        return self.gates is not None

    def check_inputs(self, input_ids: Tensor, attention_mask: Tensor) -> None:
        # Data-dependent checks cannot be traced; the exporter checks shapes its own way.
        if not torch.compiler.is_compiling():
            check_model_inputs(
                input_ids, attention_mask,
                max_seq=self.config.max_seq, vocab_size=self.config.vocab_size,
            )

    def _require_gates(self) -> None:
        if self.gates is None:
            raise ConfigError(f"variant {self.config.variant!r} has no gates")

    @torch.no_grad()
    def gate_scores(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The gate network's logits s [B, T] for these inputs, without noise: a gate is open
        where s > 0 (`training.calibration` reads them)."""
        self._require_gates()
        return self.gates.scores(self.embed(input_ids), attention_mask != 0)  # [B, T]

    @torch.no_grad()
    def shift_gate_threshold(self, shift: float) -> None:
        """Move every gate logit by `shift` for good (one bias value; the graph keeps its form)."""
        self._require_gates()
        self.gates.shift_threshold(shift)

    @torch.no_grad()
    def eval_gates(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """The hard gates [B, T] that eval mode would apply to these inputs, in either mode: the
        auxiliary network's logits s without noise, open where s > 0, with the rescue."""
        return hard_gates(self.gate_scores(input_ids, attention_mask), attention_mask != 0)

    def gate_outputs(
        self, state: GateState | None, applied: Tensor | None, mask: Tensor, details: bool
    ) -> dict[str, Tensor]:
        """The `gates` output (and training extras) of a GA-Net model; {} otherwise."""
        if state is None:
            return {}
        # The logits the gates were decided on: s in training and in `threshold` mode, s + L in
        # `sample` mode, so that `gates == hard_gates(gate_logits)` and rescues are countable.
        decision = state.raw_logits if self.training else state.gate_logits
        if applied is None:  # training, or a head that applies no pooling op
            with torch.no_grad():
                applied = hard_gates(decision, mask)
        out = {"gates": applied}
        if details:
            out["gate_logits"] = decision
            if state.soft_gates is not None:
                out["density_penalty"] = soft_density(state.soft_gates, mask)
        return out
