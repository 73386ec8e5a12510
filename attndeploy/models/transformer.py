"""Transformer encoder with its family's head (`build_head` of the family's training part:
pooled sequence classification, per-token tagging, ...), any variant.

Letters: b batch, t position, D model width. Pre-LayerNorm blocks; learned absolute positions.
GA-Net: one gate network over the token embeddings (before positions are added), gates shared
by all layers and the pooling. Evolving: one chain of carried logits through all layers.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.config import ModelConfig
from attndeploy.models.base import AttnModel
from attndeploy.variants.api import LayerContext
from attndeploy.variants.registry import get_variant


class EncoderBlock(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.norm_attention = nn.LayerNorm(config.d_model)
        self.attention = get_variant(config.variant).from_config(config, layer_index)
        self.norm_ffn = nn.LayerNorm(config.d_model)
        self.ffn = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
        result = self.attention.forward_context(self.norm_attention(x), context)
        x = x + self.dropout(result.output)
        x = x + self.dropout(self.ffn(self.norm_ffn(x)))
        return x, result.logits


class TransformerModel(AttnModel):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, config.d_model)
        self.embed = nn.Embedding(config.vocab_size, config.d_model, padding_idx=0)
        self.position = nn.Embedding(config.max_seq, config.d_model)
        # the QVI paper's CNN-Transformer: a convolution over neighbouring tokens' embeddings
        # (characters, for Chinese NER), added to each token's before the encoder
        self.cnn = (nn.Conv1d(config.d_model, config.d_model, config.char_cnn,
                              padding=config.char_cnn // 2) if config.char_cnn else None)
        self.blocks = nn.ModuleList(EncoderBlock(config, i) for i in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = self.family_part.build_head(config, config.d_model, self.is_gated)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, *, details: bool = False
    ) -> dict[str, Tensor]:
        self.check_inputs(input_ids, attention_mask)
        mask = attention_mask != 0  # [B, T] bool
        tokens = self.embed(input_ids)  # [B, T, D]
        if self.cnn is not None:  # pads zeroed first: a row's padding never reaches its tokens
            local = (tokens * mask.unsqueeze(-1)).transpose(1, 2)  # [B, D, T]
            tokens = tokens + torch.relu(self.cnn(local)).transpose(1, 2)  # [B, T, D]
        state = None
        context = LayerContext(key_padding_mask=mask)
        if self.gates is not None:
            state = self.gates(tokens, mask)
            context = self.gates.layer_context(state, mask)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # [T]
        x = tokens + self.position(positions)[None, :, :]  # [B, T, D]
        for block in self.blocks:
            x, logits = block(x, context)
            context = context.with_prev_logits(logits)
        x = self.norm(x)
        logits, applied = self.family_part.apply_head(self.head, x, context)  # [B, C] or [B, T, C]
        return {"logits": logits, **self.gate_outputs(state, applied, mask, details)}
