"""The forward hooks a converted model runs on: the mask, a gated variant's gates, the chain.

`install_hooks` puts on the base model (`model.base_model`) a forward pre-hook that reads the 2-D
`attention_mask` as the layers' key padding mask (and hands the model None instead, so it builds
no 4-D mask), a forward hook that ends the pass, and for a gated variant a hook on the
word-embedding table through which its gate machinery scores the token embeddings once per pass
(`integrations.transformers`, module docstring). The `ForwardState` they drive (each pass
starts and finishes it) lives here too; `integrations.transformers`, which installs the hooks for
`convert`, re-exports it and hands in what the hooks read, so this module does not import it
back.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.variants.api import GateState, LayerContext
from attndeploy.variants.registry import variant_spec


@dataclass
class ForwardState:
    """What the converted layers of one model share during a forward pass.

    key_padding_mask: bool [B, T] from the base model's `attention_mask` (None outside a pass).
    gate_state: a gated variant's `GateState` for this pass, from its gate machinery (kept after
        the pass); `gate_logits` its decision logits [B, T] (GA-Net: s in eval; s + logistic
        noise in training).
    context: what every gated layer is handed (the machinery's `layer_context`).
    prev_logits: a chained variant's carried logits [B, H, T, T] (None outside a pass).
    gates: the hard gates bool [B, T] the last gated layer applied, where it reports them (kept
        after the pass).
    """

    active: bool = False
    key_padding_mask: Tensor | None = None
    gate_state: GateState | None = None
    context: LayerContext | None = None
    prev_logits: Tensor | None = None
    gates: Tensor | None = None

    @property
    def gate_logits(self) -> Tensor | None:
        return None if self.gate_state is None else self.gate_state.gate_logits

    def start(self, key_padding_mask: Tensor) -> None:
        self.active = True
        self.key_padding_mask = key_padding_mask
        self.gate_state = self.context = self.prev_logits = self.gates = None

    def set_gates(self, gate_state: GateState, context: LayerContext) -> None:
        self.gate_state, self.context = gate_state, context

    def finish(self) -> None:
        """End of a pass: drop what only the pass needs (the chain holds B·H·T² floats)."""
        self.active = False
        self.key_padding_mask = self.prev_logits = self.context = None

# The gate logit of GA-Net's `open_token_ids`: open at eval (> 0) and, past every draw of the
# training noise that matters, in training (σ(12 + L) < 0.5 has probability σ(-12) ≈ 6e-6).
ALWAYS_OPEN_LOGIT = 12.0


def hold_open(logits: Tensor, input_ids: Tensor, open_ids: tuple[int, ...]) -> Tensor:
    """Gate logits [B, T] with the keys of GA-Net's `open_token_ids` held open (in training,
    noise or not, and at eval)."""
    if not open_ids:
        return logits
    kept = torch.zeros_like(input_ids, dtype=torch.bool)  # [B, T]
    for token_id in open_ids:
        kept = kept | (input_ids == token_id)
    return torch.where(kept, torch.full_like(logits, ALWAYS_OPEN_LOGIT), logits)  # [B, T]


def _forward_signature(module: nn.Module) -> inspect.Signature:
    return inspect.signature(module.forward)


def install_hooks(base: nn.Module, layers: list[nn.Module], state: ForwardState,
                  gate_network: nn.Module | None, *, variant: str,
                  open_ids: tuple[int, ...]) -> list[Any]:
    """Put the hooks on `base` (and for a gated variant on its word embeddings) that drive
    `state`; their handles, for the caller to keep. `layers`: the encoder layers (gradient
    checkpointing breaks a chained variant's chain); `gate_network`: the variant's gate
    machinery; `open_ids`: the keys held open (GA-Net's `open_token_ids`)."""
    signature = _forward_signature(base)
    spec = variant_spec(variant)
    handles: list[Any] = []

    def score(embeddings: Tensor, key_padding_mask: Tensor, input_ids: Tensor | None) -> None:
        """This pass's gates from the machinery; the `open_token_ids` (a sub-config that has
        them: GA-Net's) held open on the logits it decides on."""
        if open_ids and input_ids is not None:
            gate_state = gate_network(embeddings, key_padding_mask,
                                      hold=lambda logits: hold_open(logits, input_ids, open_ids))
        else:
            gate_state = gate_network(embeddings, key_padding_mask)
        state.set_gates(gate_state, gate_network.layer_context(gate_state, key_padding_mask))

    def before(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        ids, embeds = arguments.get("input_ids"), arguments.get("inputs_embeds")
        reference = ids if ids is not None else embeds
        if reference is None:
            return None  # the model raises its own error
        mask = arguments.get("attention_mask")
        if mask is None:
            key_padding_mask = torch.ones(reference.shape[:2], dtype=torch.bool,
                                          device=reference.device)  # [B, T]
        elif mask.dim() != 2:
            raise ConfigError(
                f"converted models take a 2-D attention_mask [batch, seq] (1 = real token); got "
                f"{list(mask.shape)}"
            )
        else:
            key_padding_mask = mask != 0  # [B, T]
        if spec.chained and module.training and any(
            getattr(layer, "gradient_checkpointing", False) for layer in layers
        ):
            raise ConfigError(f"gradient checkpointing recomputes layers out of order, which "
                              f"breaks the chain of {spec.title}'s layers; disable it for "
                              f"{spec.name} models")
        state.start(key_padding_mask)
        if gate_network is not None and ids is None:  # no token lookup: score the given embeds
            score(embeds, key_padding_mask, None)
        if mask is None:
            return None
        arguments["attention_mask"] = None  # the layers read state.key_padding_mask
        return bound.args, bound.kwargs

    def after(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        state.finish()

    handles.append(base.register_forward_pre_hook(before, with_kwargs=True))
    handles.append(base.register_forward_hook(after, with_kwargs=True))
    if gate_network is not None:

        def score_tokens(module: nn.Module, args: tuple, output: Tensor) -> None:
            if state.active and state.gate_state is None:
                score(output, state.key_padding_mask, args[0])

        word_embeddings = base.embeddings.word_embeddings
        handles.append(word_embeddings.register_forward_hook(score_tokens))
    return handles
