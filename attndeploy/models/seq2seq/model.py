"""`Seq2Seq`: a small pre-norm Transformer encoder-decoder with any variant in its three kinds
of attention (issue #51; docs/translation.md). Letters: b batch, S source tokens, n new target
tokens, P cached target tokens, D model dim, V vocabulary, H heads, d head dim.

    source ids [B, S] -> embeddings + positions -> encoder blocks (variant self-attention)
      -> LN -> memory [B, S, D]  (GA-Net: and the source tokens' cross gates)
    target ids [B, n] -> embeddings + positions -> decoder blocks:
      h += causal self-attention(LN(h)) (the variant's causal form, with its cache)
      h += cross-attention(LN(h), memory) (`cross`)
      h += FFN(LN(h))
      -> LN -> output layer (tied to the embeddings) -> logits [B, n, V]

The decoder state is one flat dict of named tensors, named as the export names them (Optimum's
seq2seq convention): `past_key_values.{l}.decoder.{entry}` for layer l's self-attention cache
(`key`, `value` and the variant's own entries, as the decoder-only model's), and
`past_key_values.{l}.encoder.{entry}` for its cross-attention: `key` and `value` computed once
from the memory (`cross_state`), and Evolving Attention's `evolving_rows` [B, H, 2, S] (the
last two rows of the layer's cross A_in), which `decode` returns updated. `decode` returns the
entries that change (`present`, keyed by their past names); the cross keys and values stay.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.models.seq2seq import cross
from attndeploy.models.seq2seq.config import Seq2SeqConfig
from attndeploy.variants.api import LayerContext
from attndeploy.variants.evolving.causal import CausalEvolvingAttention
from attndeploy.variants.evolving.layer import EvolvingAttention
from attndeploy.variants.functional import hard_gates
from attndeploy.variants.ganet.causal import CausalGatedAttention, CausalGateNetwork
from attndeploy.variants.ganet.layer import (
    GatedAttention,
    GateNetwork,
    logistic_noise,
    relax_gates,
)
from attndeploy.variants.qvi.causal import CausalQVIAttention
from attndeploy.variants.qvi.layer import QVIAttention
from attndeploy.variants.standard.causal import CausalStandardAttention
from attndeploy.variants.standard.layer import StandardAttention

State = dict[str, Tensor]
GATE_BIAS = 1.0  # gate networks start open (logit 1 > 0)


@dataclass
class Memory:
    """The encoder's answer: hidden [B, S, D]; mask bool [B, S] (the source tokens the cross-
    attention reads: real ones, and for GA-Net in eval only the open ones); log_gates [B, S]
    (GA-Net training: the relaxed cross gates) or None."""

    hidden: Tensor
    mask: Tensor
    log_gates: Tensor | None = None


def _feed_forward(config: Seq2SeqConfig) -> nn.Module:
    return nn.Sequential(nn.Linear(config.d_model, config.d_ff), nn.GELU(),
                         nn.Linear(config.d_ff, config.d_model))


def _encoder_attention(config: Seq2SeqConfig, index: int) -> nn.Module:
    d, h = config.d_model, config.n_heads
    if config.variant == "qvi":
        return QVIAttention(d, h, form="pooled")
    if config.variant == "ganet":
        return GatedAttention(d, h, temperature=config.ganet_temperature)
    if config.variant == "evolving":
        return EvolvingAttention(d, h, alpha=config.evolving_alpha, beta=config.evolving_beta,
                                 negative_slope=config.evolving_negative_slope,
                                 chain_start=index == 0)
    return StandardAttention(d, h)


def _decoder_attention(config: Seq2SeqConfig, index: int) -> nn.Module:
    d, h = config.d_model, config.n_heads
    if config.variant == "qvi":
        return CausalQVIAttention(d, h, form=config.qvi_form)
    if config.variant == "ganet":
        return CausalGatedAttention(d, h, temperature=config.ganet_temperature)
    if config.variant == "evolving":
        return CausalEvolvingAttention(d, h, alpha=config.evolving_alpha,
                                       beta=config.evolving_beta,
                                       negative_slope=config.evolving_negative_slope,
                                       chain_start=index == 0)
    return CausalStandardAttention(d, h)


class EncoderBlock(nn.Module):
    """Pre-norm: h + attention(LN(h)), then h + FFN(LN(h))."""

    def __init__(self, config: Seq2SeqConfig, index: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attention = _encoder_attention(config, index)
        self.attention.layer_index = index
        self.ln2 = nn.LayerNorm(config.d_model)
        self.ffn = _feed_forward(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, h: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
        result = self.attention.forward_context(self.ln1(h), context)
        h = h + self.dropout(result.output)  # [B, S, D]
        return h + self.dropout(self.ffn(self.ln2(h))), result.logits


class DecoderBlock(nn.Module):
    """Pre-norm: causal self-attention, cross-attention, FFN, each added to h."""

    def __init__(self, config: Seq2SeqConfig, index: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attention = _decoder_attention(config, index)
        self.ln_cross = nn.LayerNorm(config.d_model)
        self.cross = cross.cross_layer(config.variant, config.d_model, config.n_heads, index,
                                       alpha=config.evolving_alpha, beta=config.evolving_beta,
                                       negative_slope=config.evolving_negative_slope,
                                       qvi_form=config.qvi_cross_form)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.ffn = _feed_forward(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, h: Tensor, mask: Tensor | None, extra: Tensor | None, past: State | None,
                cross_state: State, memory: Memory, prev_cross: Tensor | None
                ) -> tuple[Tensor, object, Tensor | None, Tensor | None]:
        """(h [B, n, D], the self-attention's CausalResult, this layer's cross map (Evolving)
        [B, H, n, S], its new cross rows [B, H, 2, S] or None)."""
        x = self.ln1(h)  # [B, n, D]
        if isinstance(self.attention, (CausalGatedAttention, CausalEvolvingAttention)):
            result = self.attention(x, mask, extra, past)  # gates / previous self map
        else:
            result = self.attention(x, mask, past)
        h = h + self.dropout(result.output)  # [B, n, D]
        q = cross.cross_query(self.cross, self.ln_cross(h))  # [B, H, n, d]
        k, v = cross_state["key"], cross_state["value"]  # [B, H, S, d] each
        logits = rows = None
        if isinstance(self.cross, cross.EvolvingCross):
            heads, logits, rows = self.cross.attend_rows(q, k, v, memory.mask, prev_cross,
                                                         cross_state.get("evolving_rows"))
        elif isinstance(self.cross, cross.StandardCross):
            heads = self.cross.attend(q, k, v, memory.mask, memory.log_gates)
        else:
            heads = self.cross.attend(q, k, v, memory.mask)
        h = h + self.dropout(self.cross.merge(heads))  # [B, n, D]
        return h + self.dropout(self.ffn(self.ln2(h))), result, logits, rows


class Seq2Seq(nn.Module):
    """The model of the module docstring."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, d)
        nn.init.normal_(self.token_embedding.weight, std=d ** -0.5)
        self.source_positions = nn.Embedding(config.max_source, d)
        self.target_positions = nn.Embedding(config.max_target, d)
        for table in (self.source_positions, self.target_positions):
            nn.init.normal_(table.weight, std=0.02)
        ganet = config.variant == "ganet"
        hidden = config.ganet_aux_hidden
        self.source_gates = GateNetwork(d, kind="mlp", hidden=hidden,
                                        bias_init=GATE_BIAS) if ganet else None
        self.encoder = nn.ModuleList(EncoderBlock(config, i)
                                     for i in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(d)
        self.cross_gates = GateNetwork(d, kind="mlp", hidden=hidden,
                                       bias_init=GATE_BIAS) if ganet else None
        self.target_gates = CausalGateNetwork(d, kind="mlp", hidden=hidden,
                                              bias_init=GATE_BIAS) if ganet else None
        self.decoder = nn.ModuleList(DecoderBlock(config, i)
                                     for i in range(config.decoder_layers))
        self.decoder_norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight
        self.dropout = nn.Dropout(config.dropout)
        self.scale = d ** 0.5  # embeddings scaled as in Vaswani et al.

    # ------------------------------------------------------------------ the encoder

    def _gated(self, network: GateNetwork, x: Tensor, mask: Tensor) -> LayerContext:
        """GA-Net's gates over x [B, S, D] as a layer context (training: noisy logits and
        relaxed log-gates; eval: the logits, hard gates follow)."""
        s = network.scores(x, mask)  # [B, S]
        if not self.training:
            return LayerContext(mask, gate_logits=s)
        noisy = s + logistic_noise(s.shape, like=s, generator=None)
        return relax_gates(noisy, mask, self.config.ganet_temperature, False)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Memory:
        """Source ids [B, S] (right padding; mask 1 = real) -> the `Memory`."""
        if not torch.compiler.is_compiling() and input_ids.shape[1] > self.config.max_source:
            raise ConfigError(f"a source of {input_ids.shape[1]} tokens is longer than the "
                              f"model's {self.config.max_source}")
        mask = (torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None
                else attention_mask != 0)  # [B, S]
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # [S]
        h = self.token_embedding(input_ids) * self.scale + self.source_positions(positions)
        h = self.dropout(h)  # [B, S, D]
        context = (self._gated(self.source_gates, h, mask) if self.source_gates is not None
                   else LayerContext(mask))
        for block in self.encoder:
            h, logits = block(h, context)
            if logits is not None:
                context = context.with_prev_logits(logits)  # Evolving: [B, H, S, S]
        hidden = self.encoder_norm(h)  # [B, S, D]
        if self.cross_gates is None:
            return Memory(hidden, mask)
        gates = self._gated(self.cross_gates, hidden, mask)
        if self.training:
            return Memory(hidden, mask, gates.log_gates)
        return Memory(hidden, hard_gates(gates.gate_logits, mask))  # closed tokens leave

    def cross_state(self, memory: Memory) -> State:
        """Every decoder layer's cross keys and values [B, H, S, d] (computed once), and
        Evolving Attention's zero cross rows [B, H, 2, S] before the first target token."""
        state: State = {}
        for index, block in enumerate(self.decoder):
            k, v = cross.memory_kv(block.cross, memory.hidden, memory.mask)
            state[f"past_key_values.{index}.encoder.key"] = k
            state[f"past_key_values.{index}.encoder.value"] = v
            if isinstance(block.cross, cross.EvolvingCross) and not block.cross.is_chain_start:
                batch, heads, length = k.shape[0], k.shape[1], k.shape[2]
                state[f"past_key_values.{index}.encoder.evolving_rows"] = k.new_zeros(
                    batch, heads, cross.ROWS, length)
        return state

    def empty_self_state(self, batch: int) -> State:
        """Every decoder layer's self-attention state before any target token (P = 0)."""
        like = self.token_embedding.weight
        return {f"past_key_values.{index}.decoder.{name}": value
                for index, block in enumerate(self.decoder)
                for name, value in block.attention.empty_state(batch, like).items()}

    # ------------------------------------------------------------------ the decoder

    def decode(self, input_ids: Tensor, memory: Memory, state: State,
               position_ids: Tensor | None = None, attention_mask: Tensor | None = None
               ) -> tuple[Tensor, State]:
        """Target ids [B, n] at `position_ids` [B, n] (default 0..n-1), the memory and the
        state (`cross_state`, plus a past self state or none) -> (logits [B, n, V], the
        entries of the state that changed). `attention_mask` [B, P+n] covers the cached and
        the new target tokens (1 = real): training's right-padded targets (no past), or a
        served batch whose rows started at different steps (each row's cache left-padded;
        `attndeploy.generation.batching`). None: every token real."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        if not torch.compiler.is_compiling() and int(position_ids.max()) >= (
                self.config.max_target):
            raise ConfigError(f"target position {int(position_ids.max())} is beyond the "
                              f"model's {self.config.max_target} tokens")
        mask = None if attention_mask is None else attention_mask != 0  # [B, n]
        h = self.token_embedding(input_ids) * self.scale + self.target_positions(position_ids)
        h = self.dropout(h)  # [B, n, D]
        extra = None
        if self.target_gates is not None:
            extra, _ = self.target_gates(h, mask)  # [B, n] gate logits (mlp: no state)
        present: State = {}
        prev_cross = None
        for index, block in enumerate(self.decoder):
            past = _slot(state, f"{index}.decoder") or None
            h, result, prev_cross, rows = block(h, mask, extra, past,
                                                _slot(state, f"{index}.encoder"), memory,
                                                prev_cross)
            if isinstance(block.attention, CausalEvolvingAttention):
                extra = result.logits  # [B, H, n, P+n]: the next layer's previous self map
            present.update({f"past_key_values.{index}.decoder.{k}": v
                            for k, v in result.present.items()})
            if rows is not None:
                present[f"past_key_values.{index}.encoder.evolving_rows"] = rows
        return self.lm_head(self.decoder_norm(h)), present  # [B, n, V]

    def forward(self, input_ids: Tensor, attention_mask: Tensor, decoder_input_ids: Tensor,
                decoder_attention_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: logits [B, T, V] of every target position at once."""
        memory = self.encode(input_ids, attention_mask)
        logits, _ = self.decode(decoder_input_ids, memory, self.cross_state(memory),
                                attention_mask=decoder_attention_mask)
        return logits


def _slot(state: State, slot: str) -> State:
    prefix = f"past_key_values.{slot}."
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def label_smoothed_loss(logits: Tensor, labels: Tensor, smoothing: float, ignore: int
                        ) -> Tensor:
    """Mean cross-entropy with label smoothing over the labels that are not `ignore`."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=ignore, label_smoothing=smoothing)
