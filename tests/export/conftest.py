"""Tiny random-init checkpoints per case of `tests/cases.py` (2 layers), each exported once.

`exports.get(case_id, **options)` saves the case's checkpoint (once) and exports it with
`ExportOptions(**options)` on first use, so a test run that needs one case exports only that one;
an export costs seconds, everything else here milliseconds. Tests must not modify the files they
get: negative tests copy the ONNX model and edit the copy.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from attndeploy.checkpoint import read_checkpoint, save_checkpoint
from attndeploy.config import ModelConfig
from attndeploy.export.exporter import ExportOptions, ExportResult, export_checkpoint
from attndeploy.interface import make_feed
from attndeploy.models import build_model
from tests.cases import CASES, CASES_BY_ID, VariantCase

LABELS = ("neg", "neu", "pos")
# Export time grows with the layers (about 1 s each): two still give every op type, an evolving
# Start -> EA chain and a GA-Net gate shared by two layers.
EXPORT_LAYERS = {"n_layers": 2}


@dataclass(frozen=True, eq=False)  # hashed by identity: `session` is cached per object
class Exported:
    """One export of one case: the checkpoint, the ONNX file and the exporter's result."""

    case: VariantCase
    config: ModelConfig
    checkpoint: Path
    path: Path
    result: ExportResult

    def load(self) -> onnx.ModelProto:
        return onnx.load(str(self.path))

    @functools.cache  # noqa: B019  (a handful of session-scoped objects)
    def session(self, optimize: bool = True) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if not optimize:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )

    def run(self, ids: torch.Tensor, mask: torch.Tensor, **kwargs: Any) -> list[np.ndarray]:
        return self.session(**kwargs).run(None, make_feed(ids.numpy(), mask.numpy()))

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        """The checkpoint's PyTorch model in eval mode, fp32 (the export's reference)."""
        return read_checkpoint(self.checkpoint).model.eval()

    def reference(self, ids: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return self.model(ids, mask)


class Exports:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._checkpoints: dict[tuple, tuple[ModelConfig, Path]] = {}
        self._done: dict[tuple, Exported] = {}

    def checkpoint(self, case_id: str, **config_changes: Any) -> tuple[ModelConfig, Path]:
        """The case's tiny checkpoint (2 layers, config changes applied), saved once."""
        key = (case_id, tuple(sorted(config_changes.items())))
        if key not in self._checkpoints:
            case = CASES_BY_ID[case_id]
            config = case.config(**{**EXPORT_LAYERS, **config_changes})
            name = case_id + (f"_{zlib.crc32(repr(key[1]).encode()):08x}" if key[1] else "")
            torch.manual_seed(zlib.crc32(name.encode()))  # the same weights in any test order
            path = save_checkpoint(
                build_model(config), self.root / f"ckpt_{name}", label_names=LABELS
            )
            self._checkpoints[key] = (config, path)
        return self._checkpoints[key]

    def get(
        self, case_id: str, config_changes: dict[str, Any] | None = None, **options: Any
    ) -> Exported:
        """The case exported with `ExportOptions(**options)` (once per session)."""
        config_changes = config_changes or {}
        key = (case_id, tuple(sorted(config_changes.items())), tuple(sorted(options.items())))
        if key not in self._done:
            config, checkpoint = self.checkpoint(case_id, **config_changes)
            path = self.root / f"{checkpoint.name}_{len(self._done)}.onnx"
            result = export_checkpoint(checkpoint, path, ExportOptions(**options))
            self._done[key] = Exported(
                CASES_BY_ID[case_id], config, checkpoint, path, result
            )
        return self._done[key]

    def results(self) -> list[ExportResult]:
        return [exported.result for exported in self._done.values()]


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    return Exports(tmp_path_factory.mktemp("export_artifacts"))


ALL_CASE_IDS = [case.id for case in CASES]
