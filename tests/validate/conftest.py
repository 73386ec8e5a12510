"""Tiny random-init checkpoints, each exported to ONNX once per session (export costs seconds).

`artifacts.get(name)` saves the checkpoint and exports it on first use, so a test run that needs
one variant exports only that one. Negative tests copy the exported file and edit the copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
import torch

from attndeploy.checkpoint import read_checkpoint, save_checkpoint
from attndeploy.config import GANetConfig, ModelConfig, QVIConfig
from attndeploy.export.exporter import ExportOptions, export_checkpoint
from attndeploy.models import build_model

MAX_SEQ = 32
VOCAB = 50
# one layer where one shows the variant (export time grows with layers); evolving needs two
BASE = dict(vocab_size=VOCAB, num_labels=3, d_model=16, n_heads=2, n_layers=1, d_ff=32,
            max_seq=MAX_SEQ, pool_hidden=8)
LABELS = ("neg", "neu", "pos")

# name -> config: every variant and form, and a token-tagging head on one of them
CASES: dict[str, ModelConfig] = {
    "standard": ModelConfig(**BASE),
    "qvi_pooled": ModelConfig(**BASE, variant="qvi", qvi=QVIConfig(form="pooled")),
    "qvi_pairwise": ModelConfig(**BASE, variant="qvi", qvi=QVIConfig(form="pairwise")),
    "ganet": ModelConfig(**BASE, variant="ganet", ganet=GANetConfig(aux_hidden=8)),
    "evolving_tagging": ModelConfig(**{**BASE, "n_layers": 2}, variant="evolving",
                                    head="tagging"),
}


@dataclass(frozen=True)
class Exported:
    name: str
    checkpoint: Path
    onnx: Path
    config: ModelConfig

    def load(self) -> onnx.ModelProto:
        return onnx.load(str(self.onnx))

    def load_model(self) -> torch.nn.Module:
        return read_checkpoint(self.checkpoint).model


class Artifacts:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[str, Exported] = {}

    def get(self, name: str) -> Exported:
        if name not in self._done:
            config = CASES[name]
            torch.manual_seed(sorted(CASES).index(name))
            checkpoint = save_checkpoint(build_model(config), self.root / f"ckpt_{name}",
                                         label_names=LABELS, tokenizer=None)
            path = self.root / f"{name}.onnx"
            export_checkpoint(checkpoint, path, ExportOptions())
            self._done[name] = Exported(name, checkpoint, path, config)
        return self._done[name]


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return Artifacts(tmp_path_factory.mktemp("validate_artifacts"))
