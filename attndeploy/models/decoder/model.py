"""`CausalLM`: a small decoder-only language model with any variant's causal attention and its
cache (issue #49).

Letters: b batch, n new tokens, P cached tokens, D model dim, V vocabulary, l layer.

    input_ids [B, n] -> token + position embeddings [B, n, D]
      -> n_layers pre-norm blocks: h += attention(LN(h)); h += FFN(LN(h))
      -> LN -> LM head (tied to the token embeddings by default) -> logits [B, n, V]

A LLaMA-family config (`DecoderConfig`'s `positions`, `norm`, `ffn`, `bias`, `n_kv_heads`) has
no position embedding: rotary angles of the positions turn each layer's new queries and keys
instead; RMSNorm stands for LN and SwiGLU for the FFN, and the keys and values are grouped.

The cache is one flat dict of named tensors, named as the export names its inputs (Optimum's
convention, `attndeploy.variants.api.state_names`): `past_key_values.{l}.{entry}` for layer l's
entries (`key`, `value`, and the variant's own: `evolving_rows`, `qvi_prefix_*`, GA-Net's
`key_mask`), and `past_key_values.gates.{entry}` for a GA-Net conv gate network's own state. The
model returns the same names (`present` is keyed by the past names; the export renames them
`present.{l}.{entry}`). `empty_state(batch)` gives P = 0 tensors, so one forward serves the
prefill and every decode step alike.

`attention_mask` [B, P+n] covers the cached and the new tokens (1 = real, left padding);
`position_ids` [B, n] default to the count of real tokens before each one, so a left-padded
prompt's first real token is at position 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.models.decoder.config import DecoderConfig
from attndeploy.models.decoder.layers import RotaryPositions, feed_forward, norm
from attndeploy.variants.api import Rotary
from attndeploy.variants.evolving.causal import CausalEvolvingAttention
from attndeploy.variants.ganet.causal import CausalGatedAttention, CausalGateNetwork
from attndeploy.variants.qvi.causal import CausalQVIAttention
from attndeploy.variants.standard.causal import CausalStandardAttention

State = dict[str, Tensor]
GATES = "gates"  # the layer slot of the GA-Net gate network's own state
# The axis of each state entry that grows with the tokens (the rest: batch first, then fixed).
PAST_AXIS = {"key": 2, "value": 2, "key_mask": 1, "evolving_rows": 3}


@dataclass(frozen=True)
class StateSpec:
    """One cache tensor: its input and output names, dtype and dims (`batch`, `past`, ints)."""

    past: str
    present: str
    dtype: str
    dims: tuple[str | int, ...]

    def to_dict(self) -> dict:
        return {"past": self.past, "present": self.present, "dtype": self.dtype,
                "dims": list(self.dims)}


def present_name(past_name: str) -> str:
    """`past_key_values.0.key` -> `present.0.key`."""
    return "present." + past_name[len("past_key_values."):]


def _attention(config: DecoderConfig, index: int) -> nn.Module:
    d, h = config.d_model, config.n_heads
    if config.variant == "qvi":
        layer = CausalQVIAttention(d, h, form=config.qvi_form)
    elif config.variant == "ganet":
        layer = CausalGatedAttention(d, h)
    elif config.variant == "evolving":
        layer = CausalEvolvingAttention(
            d, h, alpha=config.evolving_alpha, beta=config.evolving_beta,
            negative_slope=config.evolving_negative_slope, chain_start=index == 0)
        layer.set_warm_start_progress(config.evolving_mix)
    else:
        layer = CausalStandardAttention(d, h)
    if config.kv_heads != h or not config.bias:
        layer.use_projections(num_kv_heads=config.kv_heads, bias=config.bias)
    return layer


class DecoderBlock(nn.Module):
    """Pre-norm: h + attention(LN(h)), then h + FFN(LN(h))."""

    def __init__(self, config: DecoderConfig, index: int) -> None:
        super().__init__()
        self.ln1 = norm(config.norm, config.d_model, config.norm_eps)
        self.attention = _attention(config, index)
        self.ln2 = norm(config.norm, config.d_model, config.norm_eps)
        self.ffn = feed_forward(config.ffn, config.d_model, config.d_ff, config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, h: Tensor, mask: Tensor, extra: Tensor | None,
                past: State | None, rotary: Rotary | None = None) -> tuple[Tensor, object]:
        x = self.ln1(h)  # [B, n, D]
        if isinstance(self.attention, (CausalGatedAttention, CausalEvolvingAttention)):
            result = self.attention(x, mask, extra, past, rotary=rotary)  # gates / prev map
        else:
            result = self.attention(x, mask, past, rotary=rotary)
        h = h + self.dropout(result.output)  # [B, n, D]
        h = h + self.dropout(self.ffn(self.ln2(h)))  # [B, n, D]
        return h, result


class CausalLM(nn.Module):
    """The model of the module docstring: `forward(input_ids, attention_mask, position_ids,
    past) -> (logits [B, n, V], present state)`."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        if config.positions == "rope":
            self.position_embedding = None
            self.rotary = RotaryPositions(config.d_model // config.n_heads, config.rope_theta)
        else:
            self.position_embedding = nn.Embedding(config.max_seq, config.d_model)
            nn.init.normal_(self.position_embedding.weight, std=0.02)
            self.rotary = None
        self.gate_network = (CausalGateNetwork(config.d_model, kind=config.ganet_aux,
                                               hidden=config.ganet_aux_hidden, bias_init=1.0)
                             if config.variant == "ganet" else None)
        self.blocks = nn.ModuleList(DecoderBlock(config, i) for i in range(config.n_layers))
        self.final_norm = norm(config.norm, config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight
        self.dropout = nn.Dropout(config.dropout)

    # ------------------------------------------------------------------ the state

    def empty_state(self, batch: int) -> State:
        """The flat state before any token (P = 0)."""
        like = self.token_embedding.weight
        state: State = {}
        if self.gate_network is not None:
            for name, value in self.gate_network.empty_state(batch, like).items():
                state[f"past_key_values.{GATES}.{name}"] = value
        for index, block in enumerate(self.blocks):
            for name, value in block.attention.empty_state(batch, like).items():
                state[f"past_key_values.{index}.{name}"] = value
        return state

    def state_specs(self) -> tuple[StateSpec, ...]:
        """Every cache tensor, in the export's order (`empty_state`'s)."""
        specs = []
        for name, value in self.empty_state(1).items():
            axis = PAST_AXIS.get(name.rsplit(".", 1)[-1])
            dims = tuple("batch" if i == 0 else "past" if i == axis else size
                         for i, size in enumerate(value.shape))
            dtype = {torch.bool: "bool", torch.float32: "float32"}[value.dtype]
            specs.append(StateSpec(name, present_name(name), dtype, dims))
        return tuple(specs)

    # ------------------------------------------------------------------ the pass

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None, past: State | None = None,
    ) -> tuple[Tensor, State]:
        batch, new = input_ids.shape
        if attention_mask is None:
            seen = _seen(self, past) if past else 0
            attention_mask = torch.ones(batch, seen + new, dtype=torch.bool,
                                        device=input_ids.device)  # [B, P+n]
        mask = attention_mask != 0  # [B, P+n]
        if position_ids is None:
            position_ids = positions_of(mask)[:, -new:]  # [B, n]
        if not torch.compiler.is_compiling() and int(position_ids.max()) >= self.config.max_seq:
            raise ConfigError(f"position {int(position_ids.max())} is beyond the model's "
                              f"context of {self.config.max_seq} tokens")
        h = self.token_embedding(input_ids)  # [B, n, D]
        rotary = None
        if self.rotary is not None:
            rotary = self.rotary(position_ids)  # cos, sin [B, 1, n, d]
        else:
            h = h + self.position_embedding(position_ids)  # [B, n, D]
        h = self.dropout(h)
        past = past or {}
        present: State = {}
        extra = None
        if self.gate_network is not None:
            gate_past = _layer_state(past, GATES)
            extra, gate_present = self.gate_network(h, mask, gate_past)  # [B, n] logits
            present.update({f"past_key_values.{GATES}.{k}": v for k, v in gate_present.items()})
        for index, block in enumerate(self.blocks):
            h, result = block(h, mask, extra, _layer_state(past, str(index)), rotary)
            if isinstance(block.attention, CausalEvolvingAttention):
                extra = result.logits  # [B, H, n, P+n]: the next layer's previous map
            present.update({f"past_key_values.{index}.{k}": v
                            for k, v in result.present.items()})
        logits = self.lm_head(self.final_norm(h))  # [B, n, V]
        return logits, present


def _layer_state(past: State, slot: str) -> State | None:
    prefix = f"past_key_values.{slot}."
    state = {k[len(prefix):]: v for k, v in past.items() if k.startswith(prefix)}
    return state or None


def _seen(model: CausalLM, past: State) -> int:
    """P for an unpadded past (only used when no mask is given): layer 0's key length, unless
    GA-Net dropped some (then a mask is required)."""
    if model.gate_network is not None:
        raise ConfigError("a GA-Net decoder with a cache needs the attention_mask over every "
                          "token seen (its cache holds only the open ones)")
    return int(past["past_key_values.0.key"].shape[2])


def positions_of(mask: Tensor) -> Tensor:
    """int64 [B, T]: each token's position among its row's real tokens (pads: 0)."""
    counts = mask.long().cumsum(-1) - 1  # [B, T]
    return counts.clamp(min=0)
