"""Bring your own model: attndeploy layers in a plain PyTorch model, exported and validated."""

import sys

import torch
from torch import nn

from attndeploy.export import export_model
from attndeploy.nn import EvolvingAttention, GatedAttention, GateNetwork
from attndeploy.validate import validate_module


class MyClassifier(nn.Module):
    """Token ids -> GA-Net gated layer -> two evolving-attention layers -> mean -> labels."""

    def __init__(self, vocab: int = 1000, dim: int = 32, heads: int = 4, labels: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gate = GateNetwork(dim)  # GA-Net's auxiliary network: one gate logit per token
        self.gated = GatedAttention(dim, heads)
        self.evolving = nn.ModuleList([EvolvingAttention(dim, heads, chain_start=True),
                                       EvolvingAttention(dim, heads, alpha=0.5, beta=1.0)])
        self.classify = nn.Linear(dim, labels)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.bool()  # [batch, seq], True = real token
        x = self.embed(input_ids)  # [batch, seq, dim]
        y, gates = self.gated(x, mask, self.gate(x, mask))
        x = x + y
        logits = None  # the evolving chain hands its attention logits from layer to layer
        for layer in self.evolving:
            y, logits = layer(x, mask, logits)
            x = x + y
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # [batch, dim]
        return {"logits": self.classify(pooled), "gates": gates}


torch.manual_seed(0)
model = MyClassifier()
ids = torch.randint(1, 1000, (8, 12))
mask = torch.ones(8, 12, dtype=torch.long)
mask[4:, 6:] = 0  # right padding
labels = torch.randint(0, 2, (8,))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):  # train as usual: relaxed (Gumbel-sigmoid) gates in training mode
    loss = nn.functional.cross_entropy(model(ids, mask)["logits"], labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

out = sys.argv[1] if len(sys.argv) > 1 else "my_model.onnx"
result = export_model(  # traced in eval mode: hard gates, one attndeploy node per layer call
    model, out,
    inputs={"input_ids": ids[:2], "attention_mask": mask[:2]},
    dynamic_shapes={"input_ids": {0: "batch", 1: "seq"},
                    "attention_mask": {0: "batch", 1: "seq"}},
)
print(result.custom_nodes)  # {'GatedAttention': 1, 'EvolvingAttentionStart': 1, ...}

report = validate_module(model, out, grid="1x1,3x1,2x5,4x17,2x32", vocab_size=1000)
report.write_json(out + ".parity.json")  # statistics per oracle, shape and output
report.raise_for_failure()  # gates must agree exactly, logits within 1e-5 / 1e-4
print("parity passed:", ", ".join(report.oracles))
