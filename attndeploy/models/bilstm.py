"""The paper's GA-Net model: BiLSTM backbone, BiLSTM auxiliary gate network, gated pooling.

Letters: b batch, t position. docs/variants.md §3.4. Variant `standard` is the same model with soft
(ungated) attention pooling, the paper's baseline.
"""

from __future__ import annotations

from torch import Tensor, nn

from attndeploy.config import ModelConfig
from attndeploy.models.base import AttnModel
from attndeploy.variants.api import LayerContext, PaddedBiLSTM


class BiLSTMModel(AttnModel):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, config.d_model)
        self.embed = nn.Embedding(config.vocab_size, config.d_model, padding_idx=0)
        self.backbone = PaddedBiLSTM(config.d_model, config.lstm_hidden, num_layers=2)
        self.head = self.family_part.build_head(config, 2 * config.lstm_hidden, self.is_gated)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, *, details: bool = False
    ) -> dict[str, Tensor]:
        self.check_inputs(input_ids, attention_mask)
        mask = attention_mask != 0  # [B, T] bool
        tokens = self.embed(input_ids)  # [B, T, E]
        state = None
        context = LayerContext(key_padding_mask=mask)
        if self.gates is not None:
            state = self.gates(tokens, mask)
            context = self.gates.layer_context(state, mask)
        h = self.backbone(tokens, mask)  # [B, T, 2h]
        logits, applied = self.family_part.apply_head(self.head, h, context)  # [B, C]
        return {"logits": logits, **self.gate_outputs(state, applied, mask, details)}
