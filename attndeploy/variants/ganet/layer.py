"""GA-Net: gated attention (docs/variants.md §3). Letters: b batch, h heads, i/j query/key, t token.

One auxiliary network per model (`GateNetwork`) reads the token embeddings and scores every token
(gate logits s [B, T]). Training uses relaxed Gumbel-sigmoid gates in log space; eval mode uses
hard gates decided on the LOGITS (s > 0) with the all-closed rescue. Gates are per key position,
shared by every head, query and layer (`GatedAttention`), and by the gated attention pooling of
the classifier head.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.variants._common import (
    AttentionBase,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
    call_op,
)
from attndeploy.variants._gating import (  # noqa: F401  (GA-Net's names since 0.x)
    GateState,
    gated_pooling,
    relaxed_probs,
    soft_density,
)
from attndeploy.variants._recurrent import PaddedBiLSTM
from attndeploy.variants._reference import hard_gates, masked_softmax
from attndeploy.variants.ganet import reference
from attndeploy.variants.ganet.config import GANetConfig

NOISE_EPS = 1e-6
HARD_CONCRETE_STRETCH = (-0.1, 1.1)  # the interval the hard-concrete gate is stretched to
HARD_CONCRETE_FLOOR = 1e-6  # log of a clipped (closed) training gate: a weight of 1e-6, not 0
# A warm start's gate logit (`GateNetwork.start_open`): every hard gate open; in training the
# logistic noise still closes a gate now and then (P(s + L < 0) = σ(−4) ≈ 1.8 %).
OPEN_GATE_LOGIT = 4.0


def logistic_noise(shape: torch.Size, *, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """L = log U − log(1 − U), U ~ Uniform(eps, 1 − eps): one draw per token."""
    u = torch.rand(shape, generator=generator, device=like.device, dtype=torch.float32)
    u = u.clamp(NOISE_EPS, 1 - NOISE_EPS)
    return (torch.log(u) - torch.log1p(-u)).to(like.dtype)


class GateNetwork(nn.Module):
    """GA-Net's auxiliary network: x [B, T, E] (token embeddings), mask [B, T] -> logits [B, T].

    `GateNetwork(embed_dim, *, kind="mlp"|"conv"|"bilstm", hidden=128, bias_init=0.0,
    lstm_hidden=100, sample_in_training=True)` (docs/variants.md §3.2). `scores(x, mask)` is the
    network's output s. `forward` returns the DECISION logits: s in eval mode; s + L (logistic
    noise, one draw per token per call) in training when `sample_in_training`, so that every
    `GatedAttention` fed the same logits shares one draw, as the paper's relaxation wants.
    The `bilstm` kind exports as standard ONNX `LSTM` nodes.
    """

    def __init__(
        self,
        embed_dim: int,
        *,
        kind: str = "mlp",
        hidden: int = 128,
        bias_init: float = 0.0,
        lstm_hidden: int = 100,
        sample_in_training: bool = True,
    ) -> None:
        super().__init__()
        GANetConfig(aux=kind, aux_hidden=hidden, aux_bias_init=float(bias_init))  # validates
        self.kind = kind
        self.sample_in_training = sample_in_training
        self.generator: torch.Generator | None = None
        if kind == "mlp":
            self.body = nn.Sequential(nn.Linear(embed_dim, hidden), nn.GELU())
            out_features = hidden
        elif kind == "conv":
            self.body = nn.Conv1d(embed_dim, hidden, kernel_size=3, padding=1)
            out_features = hidden
        else:
            self.body = PaddedBiLSTM(embed_dim, lstm_hidden, num_layers=1)
            out_features = 2 * lstm_hidden
        self.score = nn.Linear(out_features, 1)
        nn.init.constant_(self.score.bias, bias_init)

    @torch.no_grad()
    def start_open(self, logit: float = OPEN_GATE_LOGIT) -> None:
        """Every gate open: s = `logit` > 0 for every token (the last layer's weight 0, its bias
        `logit`), so hard gates keep every key, as the model had before gating; the density
        penalty then closes gates while fine-tuning. The last layer still learns (its weight's
        gradient is the features times the gate's)."""
        if not logit > 0:
            raise ConfigError(f"an open gate needs a logit > 0, got {logit}")
        self.score.weight.zero_()
        self.score.bias.fill_(logit)

    @torch.no_grad()
    def shift_threshold(self, shift: float) -> None:
        """Move every logit s by `shift` for good (the last layer's bias)."""
        self.score.bias.add_(shift)

    def scores(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The auxiliary network's logits s [B, T] (no noise)."""
        mask = as_key_padding_mask(key_padding_mask, x)
        if self.kind == "mlp":
            features = self.body(x)  # [B, T, a]
        elif self.kind == "conv":
            zeroed = x * mask[:, :, None].to(x.dtype)  # pads = 0
            features = F.gelu(self.body(zeroed.transpose(1, 2)).transpose(1, 2))  # [B, T, a]
        else:
            features = self.body(x, mask)  # [B, T, 2h]
        return self.score(features).squeeze(-1)  # [B, T]

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        s = self.scores(x, key_padding_mask)  # [B, T]
        if self.training and self.sample_in_training:
            s = s + logistic_noise(s.shape, like=s, generator=self.generator)
        return s


class GateController(nn.Module):
    """A built-in model's gates: owns the auxiliary network, turns its logits into this pass's
    gates (noise, relaxation, `gate_mode`) once for every layer and the pooling."""

    def __init__(self, embed_dim: int, config: Any) -> None:  # a ModelConfig
        super().__init__()
        self.config = config.ganet
        self.network = GateNetwork(
            embed_dim, kind=config.ganet.aux, hidden=config.ganet.aux_hidden,
            bias_init=config.ganet.aux_bias_init, lstm_hidden=config.lstm_hidden,
        )
        self.generator: torch.Generator | None = None

    def forward(self, embeddings: Tensor, key_padding_mask: Tensor) -> GateState:
        s = self.network.scores(embeddings, key_padding_mask)  # [B, T]
        if not self.training and self.config.gate_mode == "threshold":
            return GateState(s, s, None, None, None)  # consumes no randomness
        noisy = s + logistic_noise(s.shape, like=s, generator=self.generator)
        if not self.training:  # `sample` mode: g = (s + L > 0) ∧ m with the same rescue
            return GateState(noisy, s, None, None, None)
        relaxed = relax_gates(noisy, key_padding_mask, self.config.temperature,
                              self.config.straight_through, self.config.relaxation)
        soft = relaxed_gates(noisy, self.config.temperature, self.config.relaxation)  # [B, T]
        return GateState(noisy, s, relaxed.log_gates, soft, relaxed.hard_gates)

    def scores(self, embeddings: Tensor, key_padding_mask: Tensor) -> Tensor:
        """The gate network's logits s [B, T], without noise."""
        return self.network.scores(embeddings, key_padding_mask)

    @torch.no_grad()
    def shift_threshold(self, shift: float) -> None:
        """Move every gate logit by `shift` for good (the logit layer's bias): opens (> 0) or
        closes (< 0) the gates nearest the threshold first; the exported graph keeps its form."""
        self.network.shift_threshold(shift)

    def layer_context(self, state: GateState, key_padding_mask: Tensor) -> LayerContext:
        return LayerContext(
            key_padding_mask=key_padding_mask,
            gate_logits=state.gate_logits,
            log_gates=state.log_gates,
            hard_gates=state.hard_gates,
        )

    @staticmethod
    def check_conversion(config: GANetConfig) -> None:
        """Why a converted Hugging Face model cannot gate with this sub-config (ConfigError)."""
        if config.gate_mode != "threshold":
            raise ConfigError("converted models decide GA-Net gates on the logits (gate_mode "
                              "'threshold'); 'sample' is not supported")

    @classmethod
    def for_conversion(cls, embed_dim: int, config: Any) -> ConvertedGates:
        """The gates of a converted Hugging Face model (`integrations.transformers`)."""
        cls.check_conversion(config.ganet)
        return ConvertedGates(embed_dim, config)


class ConvertedGates(GateNetwork):
    """GA-Net's gates in a converted Hugging Face model: the `GateNetwork` itself (its parameters
    keep their names), scoring the token embeddings once per pass. Its decision logits are s in
    eval and s + L in training (the layers relax them themselves, as `GatedAttention` does);
    `hold` (the conversion's `open_token_ids`) moves some logits before anything reads them.
    In training the state carries the relaxed gates for the density penalty."""

    def __init__(self, embed_dim: int, config: Any) -> None:  # a ModelConfig
        sub = config.ganet
        super().__init__(embed_dim, kind=sub.aux, hidden=sub.aux_hidden,
                         bias_init=sub.aux_bias_init, lstm_hidden=config.lstm_hidden)
        self.temperature = sub.temperature
        self.relaxation = sub.relaxation

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, *,
                hold: Any = None) -> GateState:  # hold: logits [B, T] -> logits [B, T]
        logits = super().forward(x, key_padding_mask)  # s, or s + L in training
        if hold is not None:
            logits = hold(logits)
        if not self.training:
            return GateState(logits, logits, None, None, None)
        soft = relaxed_gates(logits, self.temperature, self.relaxation)  # g_soft [B, T]
        return GateState(logits, logits, None, soft, None)

    def layer_context(self, state: GateState, key_padding_mask: Tensor) -> LayerContext:
        return LayerContext(key_padding_mask, gate_logits=state.gate_logits)


def relaxed_gates(gate_logits: Tensor, temperature: float, relaxation: str = "concrete"
                  ) -> Tensor:
    """Training-time gates g [B, T] from decision logits (s + L) (docs/variants.md §3.5).

    `concrete`: g = σ(logits / τ), the paper's binary concrete, always strictly inside (0, 1).
    `hard_concrete`: that value stretched to (−0.1, 1.1) and clipped to [0, 1] (Louizos et al.,
    "Learning Sparse Neural Networks through L0 Regularization"): a clearly closed gate is
    exactly 0 and a clearly open one exactly 1, as eval's hard gates are, while gates near the
    threshold keep a gradient.
    """
    gates = torch.sigmoid(gate_logits / temperature)  # [B, T]
    if relaxation == "concrete":
        return gates
    low, high = HARD_CONCRETE_STRETCH
    return (gates * (high - low) + low).clamp(0.0, 1.0)  # [B, T]


def relax_gates(
    gate_logits: Tensor, key_padding_mask: Tensor, temperature: float, straight_through: bool,
    relaxation: str = "concrete",
) -> LayerContext:
    """Training-time gates from decision logits (s + L): log g_soft (logsigmoid(logits / τ) for
    the concrete relaxation, which stays finite; log of the clipped gate, floored at
    `HARD_CONCRETE_FLOOR`, for hard concrete), and for straight-through the hard sampled gates
    (docs/variants.md §3.5)."""
    if relaxation == "concrete":
        log_gates = F.logsigmoid(gate_logits / temperature)  # [B, T]
    else:
        gates = relaxed_gates(gate_logits, temperature, relaxation)  # [B, T], exact 0 possible
        # A clipped gate has no gradient, so the floor only keeps log 0 out of the softmax.
        log_gates = torch.log(gates.clamp(min=HARD_CONCRETE_FLOOR))  # [B, T]
    hard = hard_gates(gate_logits, key_padding_mask) if straight_through else None
    return LayerContext(key_padding_mask, gate_logits=gate_logits, log_gates=log_gates,
                        hard_gates=hard)


class GatedAttention(AttentionBase):
    """Multi-head self-attention whose keys are gated (GA-Net, batch first).

    `GatedAttention(embed_dim, num_heads, *, bias=True, temperature=1.0, straight_through=False,
    gather_open_keys=False, scale=None, relaxation="concrete")`.
    `forward(x [B,T,D], key_padding_mask bool [B,T], gate_logits [B,T]) -> (y [B,T,D],
    gates bool [B,T])`, `gate_logits` from a `GateNetwork` (share one call between layers).
    Eval: hard gates `(logit > 0) ∧ real` with the all-closed rescue; closed keys weigh exactly
    0; exports as one `attndeploy::GatedAttention` node. Training: relaxed gates
    g = σ(logits / τ) (soft; `relaxation="hard_concrete"` stretches and clips it:
    `relaxed_gates`),
    or hard forward / soft backward with `straight_through`; `gates`
    are then the hard gates of the logits, for statistics.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        temperature: float = 1.0,
        straight_through: bool = False,
        gather_open_keys: bool = False,
        scale: float | None = None,
        relaxation: str = "concrete",
    ) -> None:
        super().__init__(embed_dim, num_heads, bias=bias, scale=scale)
        GANetConfig(temperature=float(temperature), relaxation=relaxation)  # validates
        self.temperature = float(temperature)
        self.relaxation = relaxation
        self.straight_through = straight_through
        self.gather_open_keys = gather_open_keys

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None, gate_logits: Tensor
    ) -> tuple[Tensor, Tensor]:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        heads, gates = self.attend(q, k, v, mask, gate_logits)  # [B, H, T, d], [B, T]
        return self.merge(heads), gates

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, gate_logits: Tensor
    ) -> tuple[Tensor, Tensor]:
        if self.training:
            context = relax_gates(gate_logits, mask, self.temperature, self.straight_through,
                                  self.relaxation)
            scores = self.scale * (q @ k.transpose(-2, -1))  # [B, H, Tq, Tk]
            probs = relaxed_probs(scores, context, (slice(None), None, None, slice(None)))
            gates = context.hard_gates
            if gates is None:
                with torch.no_grad():
                    gates = hard_gates(gate_logits, mask)  # [B, T]
            return probs @ v, gates
        return call_op(
            reference.gated_attention, q, k, v, mask, gate_logits,
            scale=self.scale, gather_open_keys=self.gather_open_keys,
        )

    @classmethod
    def from_config(cls, config, layer_index: int) -> GatedAttention:
        return cls(
            config.d_model, config.n_heads, temperature=config.ganet.temperature,
            straight_through=config.ganet.straight_through,
            gather_open_keys=config.ganet.gather_open_keys,
            relaxation=config.ganet.relaxation,
        )

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        y, gates = self(x, context.key_padding_mask, context.gate_logits)
        return LayerResult(y, gates=gates)


class BudgetGatedAttention(AttentionBase):
    """Self-attention over a fixed share of positions (GA-Net with a budget, batch first).

    `BudgetGatedAttention(embed_dim, num_heads, *, budget, bias=True, temperature=1.0,
    scale=None)`. `forward(x [B,T,D], key_padding_mask bool [B,T], gate_logits [B,T])
    -> (y [B,T,D], gates bool [B,T])`. Each row keeps its k = ceil(budget * T) positions of
    largest gate logit (`reference.budget_slots`); the kept positions attend among themselves,
    queries and keys, and every other position's output is exactly 0 (the output projection's
    bias included): added to a residual, the position skips the layer. Eval exports as one
    `attndeploy::BudgetGatedAttention` node (gather the k rows, attend, scatter back).

    Training computes the same function: the hard top-k forward, with the gradient passed
    straight through the gate probabilities p = σ(logits / τ) (g = kept + p − stop_grad(p),
    exactly the hard mask in the forward) on the values and the output rows, so the gate
    network learns which positions to keep. No density penalty: the density is the budget.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, budget: float, bias: bool = True,
                 temperature: float = 1.0, scale: float | None = None) -> None:
        super().__init__(embed_dim, num_heads, bias=bias, scale=scale)
        GANetConfig(temperature=float(temperature))  # validates
        check_budget(budget)
        self.budget = float(budget)
        self.temperature = float(temperature)

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None, gate_logits: Tensor
    ) -> tuple[Tensor, Tensor]:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        if not self.training:
            heads, gates = call_op(reference.budget_gated_attention, q, k, v, mask, gate_logits,
                                   scale=self.scale, budget=self.budget)  # [B, H, T, d], [B, T]
            return self.merge(heads) * gates[:, :, None].to(x.dtype), gates  # [B, T, D]
        _, gates = reference.budget_slots(gate_logits, mask, self.budget)  # [B, T]
        probs = torch.sigmoid(gate_logits / self.temperature)  # [B, T]
        through = gates.to(x.dtype) + probs - probs.detach()  # [B, T]: the hard mask, forward
        scores = self.scale * (q @ k.transpose(-2, -1))  # [B, H, T, T]
        weights = masked_softmax(scores, gates[:, None, None, :])  # [B, H, T, T]
        heads = weights @ (v * through[:, None, :, None])  # [B, H, T, d]
        return self.merge(heads) * through[:, :, None], gates  # [B, T, D]

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        y, gates = self(x, context.key_padding_mask, context.gate_logits)
        return LayerResult(y, gates=gates)


def check_budget(budget: float) -> None:
    """ConfigError unless `budget` (the share of positions kept) is a number in (0, 1]."""
    if (not isinstance(budget, (int, float)) or isinstance(budget, bool)
            or not 0.0 < budget <= 1.0):
        raise ConfigError(f"a GA-Net budget is the share of positions kept, in (0, 1]; "
                          f"got {budget!r}")


_relaxed_probs = relaxed_probs  # its name before the gated machinery was shared
