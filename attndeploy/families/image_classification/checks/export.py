"""Export an image checkpoint to one ONNX file (`attndeploy.export.generic.export_model`, its
contract checks included): input `pixel_values` float32 [batch, C, H, W] (batch dynamic; C, H
and W the model's), outputs `logits` [batch, classes] and GA-Net's `gates` [batch, positions];
each call of a QVI, GA-Net or Evolving layer is one `attndeploy` node with its function
(standard attention is plain ONNX). The metadata holds what a runtime needs besides the graph:
the variant, head, labels, the model config and the preprocessing (`attndeploy.preprocessing`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attndeploy import __version__
from attndeploy.errors import ExportError
from attndeploy.export.generic import ExportResult, export_model
from attndeploy.families.image_classification import PIXEL_VALUES
from attndeploy.families.image_classification.pixels import META_PREPROCESSING
from attndeploy.models.vision.checkpoint import load_image_model
from attndeploy.runtime.contract import CONTRACT_VERSION
from attndeploy.runtime.names import (
    META_CONFIG,
    META_CONTRACT_VERSION,
    META_DTYPE,
    META_FAMILY,
    META_HEAD,
    META_LABELS,
    META_VARIANT,
    META_VERSION,
    META_WEIGHTS,
)
from attndeploy.variants.op_registry import DEFAULT_OPSET

TRACE_BATCH = 2  # the example batch traced (any size > 1 keeps the batch dim symbolic)


@dataclass
class ImageExport:
    path: Path
    result: ExportResult

    def summary(self) -> dict[str, Any]:
        return {"path": str(self.path), "inputs": list(self.result.input_names),
                "outputs": list(self.result.output_names),
                "custom_nodes": dict(self.result.custom_nodes),
                "seconds": round(self.result.seconds, 2)}


def output_names(variant: str, attention: bool) -> list[str]:
    return ["logits", "gates"] if attention and variant == "ganet" else ["logits"]


def export_image_checkpoint(checkpoint: Path, out: Path, *, opset: int | None = None,
                            inline_functions: bool = False, **refused: Any) -> ImageExport:
    """The checkpoint's model -> `out` (written atomically, only when every check passes)."""
    given = sorted(f"--{name.replace('_', '-')}" for name, value in refused.items()
                   if value not in (None, False))
    if given:
        raise ExportError(f"{', '.join(given)} does not apply to an image model: it exports "
                          "in fp32 for its own input size")
    loaded = load_image_model(checkpoint)
    config = loaded.config
    example = torch.randn(TRACE_BATCH, *loaded.preprocessing.shape,
                          generator=torch.Generator().manual_seed(0))  # [b, C, H, W]
    metadata = {
        META_VARIANT: config.variant, META_FAMILY: config.architecture, META_HEAD: config.head,
        META_VERSION: __version__, META_CONFIG: json.dumps(config.to_dict(), sort_keys=True),
        META_WEIGHTS: str(loaded.raw.get("weights_sha256", "")),
        META_LABELS: json.dumps(list(loaded.labels)), META_DTYPE: "float32",
        META_PREPROCESSING: loaded.preprocessing.to_json(),
        META_CONTRACT_VERSION: str(CONTRACT_VERSION),
    }
    result = export_model(loaded.model, out, inputs={PIXEL_VALUES: example},
                          dynamic_shapes={PIXEL_VALUES: {0: "batch"}},
                          output_names=output_names(config.variant, config.attention),
                          opset=DEFAULT_OPSET if opset is None else opset, metadata=metadata,
                          inline_functions=inline_functions)
    return ImageExport(Path(out), result)
