"""A converted pretrained decoder's variant: its warm start and how fine-tuning brings it in
(issue #49).

`start_warm(model)` puts every variant at the pretrained model's own function (QVI: Ṽ = V;
GA-Net: every gate open; Evolving Attention: α and β in use 0, the conv the identity), so step 0
of a fine-tune computes exactly what the pretrained model did. Evolving Attention's identity
differs from the bidirectional layer's: the row-causal kernel has no row padding, so row i of
C reads rows i−2, i−1, i of A_in through kernel rows 0, 1, 2 (docs/variants.md §5.5), and the
identity is kernel row 2, column 1 (`CausalEvolvingAttention.IDENTITY_TAP`, set by its
`start_as_vanilla`). The bidirectional layer's centre tap (1, 1)
would hand every row the map of the row above it: once β comes in, each query attends as the
previous one did, which is what wrecked the first SmolLM2 fine-tune (held-out perplexity 60 ->
249).

`evolving_mix_at(step, ramp_steps, cap)` is the bring-in schedule: Evolving Attention's share
of α and β in use rises linearly from 0 (the converted model: exact) to `cap` over
`ramp_steps` steps and stays there. The cap exists because a model pretrained without the mix
cannot absorb all of it in a short fine-tune: SmolLM2's held-out perplexity, converted and not
trained, is 57.3 at mix 0 and 0.1, 58.4 at 0.2, 70 at 0.5 and 180 at 1 (benchmarks/README.md,
`smollm2_finetune.py`). `density_target_at` brings a GA-Net density target in the same way.
"""

from __future__ import annotations

import torch

from attndeploy.models.decoder.model import CausalLM


@torch.no_grad()
def start_warm(model: CausalLM) -> CausalLM:
    """Every variant of `model` at its warm start (in place; returns `model`)."""
    for block in model.blocks:
        attention = block.attention
        attention.start_as_vanilla()  # Evolving: the identity at its own IDENTITY_TAP
    if model.gate_network is not None:
        model.gate_network.start_open()
    return model


def evolving_mix_at(step: int, ramp_steps: int, cap: float) -> float:
    """The share of α and β in use while training step `step` (0-based) runs: (step + 1) /
    ramp_steps of the way to `cap`, then `cap`."""
    if ramp_steps < 1:
        return cap
    return cap * min(1.0, (step + 1) / ramp_steps)


def density_target_at(step: int, ramp_steps: int, target: float) -> float:
    """GA-Net's density target while training step `step` runs: from 1 (every gate open, the
    warm start) down to `target` over `ramp_steps` steps, then `target`, so a pretrained model
    loses its tokens gradually rather than all at the first step."""
    if ramp_steps < 1:
        return target
    return 1.0 - (1.0 - target) * min(1.0, (step + 1) / ramp_steps)
