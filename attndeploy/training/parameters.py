"""The optimizer's parameter groups: a pretrained model's own weights and the ones it lacked.

A warm-started conversion (`integrations.transformers.convert`) adds parameters a pretrained
encoder never had: the variant's own (QVI's maps, Evolving Attention's convs, GA-Net's gate
network) and a new classification head. At the encoder's fine-tuning rate (5e-5) they hardly
move in a few epochs: GA-Net's gate logits, which start at +4, stayed above 0 and every gate
stayed open (held-out density 1.000 on the Debian descriptions). They train at
`TrainConfig.new_learning_rate` instead (benchmarks/README.md, `pretrained.py`).
"""

from __future__ import annotations

from typing import Any

from attndeploy.errors import ConfigError
from attndeploy.training.config import TrainConfig


def parameter_groups(model: Any, config: TrainConfig, new: set[str] | None
                     ) -> list[dict[str, Any]]:
    """One AdamW group, or two when `new` names parameters with their own learning rate."""
    if not new or config.new_learning_rate is None:
        return [{"params": list(model.parameters())}]
    named = dict(model.named_parameters())
    unknown = sorted(new - set(named))
    if unknown:
        raise ConfigError(f"new parameters {unknown[:3]} are not the model's")
    return [{"params": [p for n, p in named.items() if n not in new]},
            {"params": [named[n] for n in sorted(new)], "lr": config.new_learning_rate}]
