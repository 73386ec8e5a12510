"""Option aliases and choices shared by the commands."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from attndeploy.variants.registry import variant_names

# The registered variants (`attndeploy.variants.registry`), in their order.
Variant = Enum("Variant", {name: name for name in variant_names()}, type=str)


class Family(str, Enum):
    transformer = "transformer"
    bilstm = "bilstm"


class QVIForm(str, Enum):
    pooled = "pooled"
    pairwise = "pairwise"


class AuxNetwork(str, Enum):
    mlp = "mlp"
    conv = "conv"
    bilstm = "bilstm"


class GateMode(str, Enum):
    threshold = "threshold"
    sample = "sample"


class GateRelaxation(str, Enum):
    concrete = "concrete"
    hard_concrete = "hard_concrete"


CheckpointArg = Annotated[
    Path, typer.Argument(help="Checkpoint directory (config.json + model.safetensors).")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ForceFlag = Annotated[bool, typer.Option("--force", help="Replace an existing output.")]
SeedOption = Annotated[int, typer.Option("--seed", help="Random seed (data, init, noise).")]
