"""Models a user might write around `attndeploy.nn` layers (none is a built-in family).

Letters: b batch, t position, D width, C classes. Every model takes `input_ids` and
`attention_mask` int64 [B, T] and returns a different output structure, so the generic exporter
is exercised on a tensor, a tuple and a dict.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import Tensor, nn

from attndeploy.export import export_model
from attndeploy.nn import EvolvingAttention, GatedAttention, GateNetwork, QVIAttention

VOCAB, WIDTH, HEADS, CLASSES = 40, 16, 2, 3


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """x [B, T, D], mask bool [B, T] -> the mean over real tokens [B, D]."""
    weights = mask.to(x.dtype)[:, :, None]  # [B, T, 1]
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class QVIClassifier(nn.Module):
    """Embedding -> QVI block (residual, LayerNorm) -> mean over real tokens -> logits [B, C]."""

    def __init__(self, form: str = "pooled") -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.attention = QVIAttention(WIDTH, HEADS, form=form)
        self.classify = nn.Linear(WIDTH, CLASSES)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        mask = attention_mask.bool()  # [B, T]
        x = self.embed(input_ids)  # [B, T, D]
        x = x + self.attention(self.norm(x), mask)
        return self.classify(masked_mean(x, mask))  # [B, C]


class GatedTagger(nn.Module):
    """One gate network, two gated layers sharing its logits; per-token logits and the gates."""

    def __init__(self, kind: str = "mlp") -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.gate = GateNetwork(WIDTH, kind=kind, hidden=8, lstm_hidden=6)
        self.layers = nn.ModuleList(GatedAttention(WIDTH, HEADS) for _ in range(2))
        self.tag = nn.Linear(WIDTH, CLASSES)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> dict[str, Tensor]:
        mask = attention_mask != 0  # [B, T]
        x = self.embed(input_ids)  # [B, T, D]
        gate_logits = self.gate(x, mask)  # [B, T], one draw shared by both layers in training
        gates = mask
        for layer in self.layers:
            y, gates = layer(x, mask, gate_logits)
            x = x + y
        return {"logits": self.tag(x), "gates": gates, "gate_logits": gate_logits}


class EvolvingChain(nn.Module):
    """A chain of three evolving layers (the first starts it); returns (logits, last maps)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList([
            EvolvingAttention(WIDTH, HEADS, chain_start=True),
            EvolvingAttention(WIDTH, HEADS, alpha=0.3, beta=0.5, negative_slope=0.01),
            EvolvingAttention(WIDTH, HEADS),
        ])
        self.classify = nn.Linear(WIDTH, CLASSES)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        mask = attention_mask.bool()  # [B, T]
        x = self.embed(input_ids)  # [B, T, D]
        logits = None
        for layer in self.layers:
            y, logits = layer(x, mask, logits)  # logits [B, H, T, T]
            x = x + y
        return self.classify(masked_mean(x, mask)), logits


def example_inputs(batch: int = 2, seq: int = 6, seed: int = 0) -> dict[str, Tensor]:
    """input_ids and attention_mask [B, T] with the last row padded after its first half."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (batch, seq), generator=generator)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, (seq + 1) // 2:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask}


DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


# name: (model factory, attndeploy nodes of its graph, its ONNX output names)
TOYS = {
    "qvi_pooled": (lambda: QVIClassifier("pooled"), {"QVIAttention": 1}, ("output",)),
    "qvi_pairwise": (lambda: QVIClassifier("pairwise"), {"QVIPairwiseAttention": 1},
                     ("output",)),
    "ganet_mlp": (lambda: GatedTagger("mlp"), {"GatedAttention": 2},
                  ("logits", "gates", "gate_logits")),
    "ganet_bilstm": (lambda: GatedTagger("bilstm"), {"GatedAttention": 2},
                     ("logits", "gates", "gate_logits")),
    "evolving_chain": (EvolvingChain, {"EvolvingAttentionStart": 1, "EvolvingAttention": 2},
                       ("output_0", "output_1")),
}


class Exported:
    def __init__(self, name: str, root: Path) -> None:
        factory, self.expected_nodes, self.expected_outputs = TOYS[name]
        torch.manual_seed(sum(map(ord, name)))
        self.model = factory()
        self.path = root / f"{name}.onnx"
        self.result = export_model(self.model, self.path, inputs=example_inputs(),
                                   dynamic_shapes=DYNAMIC)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(self.path), options,
                                            providers=["CPUExecutionProvider"])

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = list(self.result.output_names)
        return dict(zip(names, self.session.run(names, feed), strict=True))

    def reference(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.model.eval()
        with torch.no_grad():
            out = self.model(**{k: torch.from_numpy(v) for k, v in feed.items()})
        if isinstance(out, torch.Tensor):
            out = (out,)
        values = out.values() if isinstance(out, dict) else out
        return dict(zip(self.result.output_names, (v.numpy() for v in values), strict=True))
