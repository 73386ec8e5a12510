"""The forward hooks a converted model runs on: the mask, GA-Net's gate logits, the chain.

`install_hooks` puts on the base model (`model.base_model`) a forward pre-hook that reads the 2-D
`attention_mask` as the layers' key padding mask (and hands the model None instead, so it builds
no 4-D mask), a forward hook that ends the pass, and for GA-Net a hook on the word-embedding
table that scores the token embeddings once per pass (`integrations.transformers`, module
docstring). The `ForwardState` they drive (each pass starts and finishes it) lives here too;
`integrations.transformers`, which installs the hooks for `convert`, re-exports it and hands
in what the hooks read, so this module does not import it back.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.variants.ganet.layer import GateNetwork


@dataclass
class ForwardState:
    """What the converted layers of one model share during a forward pass.

    key_padding_mask: bool [B, T] from the base model's `attention_mask` (None outside a pass).
    gate_logits: GA-Net decision logits [B, T] (s in eval; s + logistic noise in training).
    prev_logits: Evolving attention's carried logits [B, H, T, T] (None outside a pass).
    gates: GA-Net hard gates bool [B, T] the last layer applied (kept after the pass).
    """

    active: bool = False
    key_padding_mask: Tensor | None = None
    gate_logits: Tensor | None = None
    prev_logits: Tensor | None = None
    gates: Tensor | None = None

    def start(self, key_padding_mask: Tensor) -> None:
        self.active = True
        self.key_padding_mask = key_padding_mask
        self.gate_logits = self.prev_logits = self.gates = None

    def finish(self) -> None:
        """End of a pass: drop what only the pass needs (the chain holds B·H·T² floats)."""
        self.active = False
        self.key_padding_mask = self.prev_logits = None


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
                  gate_network: GateNetwork | None, *, evolving_chain: bool,
                  open_ids: tuple[int, ...]) -> list[Any]:
    """Put the hooks on `base` (and for GA-Net on its word embeddings) that drive `state`;
    their handles, for the caller to keep. `layers`: the encoder layers (gradient
    checkpointing breaks an `evolving_chain`); `open_ids`: GA-Net's `open_token_ids`."""
    signature = _forward_signature(base)

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
        if evolving_chain and module.training and any(
            getattr(layer, "gradient_checkpointing", False) for layer in layers
        ):
            raise ConfigError("gradient checkpointing recomputes layers out of order, which breaks "
                              "the evolving-attention chain; disable it for evolving models")
        state.start(key_padding_mask)
        if gate_network is not None and ids is None:  # no token lookup: score the given embeds
            state.gate_logits = gate_network(embeds, key_padding_mask)
        if mask is None:
            return None
        arguments["attention_mask"] = None  # the layers read state.key_padding_mask
        return bound.args, bound.kwargs

    def after(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        state.finish()

    handles = [base.register_forward_pre_hook(before, with_kwargs=True),
               base.register_forward_hook(after, with_kwargs=True)]
    if gate_network is not None:

        def score_tokens(module: nn.Module, args: tuple, output: Tensor) -> None:
            if state.active and state.gate_logits is None:
                state.gate_logits = hold_open(gate_network(output, state.key_padding_mask),
                                              args[0], open_ids)  # [B, T]

        word_embeddings = base.embeddings.word_embeddings
        handles.append(word_embeddings.register_forward_hook(score_tokens))
    return handles
