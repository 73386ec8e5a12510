"""Tiny random-init checkpoints of `tests/cases.py`, each exported once per session, and copies of
an export with a bug planted in one layer.

`models.get(case_id, fp16=False)` saves the case's checkpoint (3 layers: an evolving chain of a
start and two `EvolvingAttention` layers that share one function) and exports it on first use.
`plant_in_body(source, target, layer)` gives one layer its own copy of its function (an ONNX
function overload) with the `scale` constant of the body changed, so that only that layer
computes differently; `plant_in_attribute` changes the node's own `scale` attribute instead.
Tests must not modify the files they get: they plant into copies.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
import torch

from attndeploy.checkpoint import save_checkpoint
from attndeploy.config import ModelConfig
from attndeploy.export.exporter import ExportOptions, export_checkpoint
from attndeploy.models import build_model
from tests.cases import CASES_BY_ID

LABELS = ("neg", "neu", "pos")
LAYERS = 3  # an evolving chain: EvolvingAttentionStart, then two EvolvingAttention
PLANTED_SCALE = 0.9  # the 1/sqrt(d) of these models is 0.354


@dataclass(frozen=True)
class Exported:
    case_id: str
    config: ModelConfig
    checkpoint: Path
    path: Path


class Models:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._checkpoints: dict[str, tuple[ModelConfig, Path]] = {}
        self._done: dict[tuple[str, bool], Exported] = {}

    def checkpoint(self, case_id: str) -> tuple[ModelConfig, Path]:
        if case_id not in self._checkpoints:
            config = CASES_BY_ID[case_id].config(n_layers=LAYERS)
            torch.manual_seed(zlib.crc32(case_id.encode()))  # the same weights in any order
            path = save_checkpoint(build_model(config), self.root / f"ckpt_{case_id}",
                                   label_names=LABELS)
            self._checkpoints[case_id] = (config, path)
        return self._checkpoints[case_id]

    def get(self, case_id: str, *, fp16: bool = False) -> Exported:
        key = (case_id, fp16)
        if key not in self._done:
            config, checkpoint = self.checkpoint(case_id)
            path = self.root / f"{case_id}{'_fp16' if fp16 else ''}.onnx"
            export_checkpoint(checkpoint, path, ExportOptions(fp16=fp16))
            self._done[key] = Exported(case_id, config, checkpoint, path)
        return self._done[key]


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    return Models(tmp_path_factory.mktemp("debug_models"))


def custom_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.domain == "attndeploy"]


def plant_in_body(source: Path, target: Path, layer: int) -> str:
    """Copy `source` to `target` with layer `layer`'s own function copy, its `scale` constant
    changed; returns the name of the body node that was edited."""
    model = onnx.load(str(source))
    node = custom_nodes(model)[layer]
    function = next(f for f in model.functions if (f.domain, f.name, f.overload)
                    == (node.domain, node.op_type, ""))
    planted = onnx.FunctionProto()
    planted.CopyFrom(function)
    planted.overload = "planted"
    edited = []
    for inner in planted.node:
        for attribute in inner.attribute:
            if attribute.ref_attr_name == "scale":
                attribute.ref_attr_name = ""
                attribute.f = PLANTED_SCALE
                edited.append(inner.name)
    assert len(edited) == 1, edited  # the body reads `scale` once
    model.functions.append(planted)
    node.overload = "planted"
    onnx.save(model, str(target))
    return edited[0]


def plant_in_attribute(source: Path, target: Path, layer: int) -> None:
    """Copy `source` to `target` with layer `layer`'s node attribute `scale` changed."""
    model = onnx.load(str(source))
    node = custom_nodes(model)[layer]
    (attribute,) = [a for a in node.attribute if a.name == "scale"]
    attribute.f = PLANTED_SCALE
    onnx.save(model, str(target))


@pytest.fixture(scope="session")
def decoder_exports(tmp_path_factory: pytest.TempPathFactory):
    """Tiny exported decoders of the generation case table (tests/quantize/decoders.py)."""
    from tests.quantize.decoders import DecoderExports

    return DecoderExports(tmp_path_factory.mktemp("debug_decoder_exports"))
