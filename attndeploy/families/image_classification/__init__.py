"""image-classification: an image in, one label out (issue #53; docs/images.md).

Two architectures with every attention variant (`attndeploy.models.vision`): a small ViT
(patches as tokens) and an attention-augmented CNN (AA-ResNet style: convolution features
concatenated with multi-head attention over spatial positions; Evolving Attention chains the
maps between augmented layers). The model takes a float tensor `pixel_values` [batch, channels,
height, width], preprocessed as the checkpoint records (`pixels.Preprocessing`).

Like translation, it has no label head over a text encoder, so the stages hand it their whole
job through the family hooks (`attndeploy/cli/family_hooks.py`): its training part's
`train_folder` (an image folder), and its checks part's `export_checkpoint`,
`validate_checkpoint` and `describe_checkpoint`. `predict.ImageClassifier` labels image files
with the export in process (onnxruntime, no torch).
"""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family

PIXEL_VALUES = "pixel_values"
HEAD = "image_classification"


def _outputs(num_labels: int, **options: object) -> tuple:
    from attndeploy.interface import BATCH, TensorSpec  # onnx: imported on use
    from attndeploy.runtime.names import LOGITS

    return (TensorSpec(LOGITS, "float32", (BATCH, num_labels), "unnormalised class scores"),)


def _inputs() -> tuple:
    from attndeploy.interface import BATCH, TensorSpec  # onnx: imported on use

    return (TensorSpec(PIXEL_VALUES, "float32", (BATCH, "channels", "height", "width"),
                       "images, normalised by the model's preprocessing"),)


SPEC = register_family(FamilySpec(
    name="image-classification",
    head=HEAD,
    order=70,
    summary="an image in, one label out",
    outputs=_outputs,
    inputs=_inputs,
    architectures=("vit", "aacnn"),
    min_labels=2,
    hf_heads=(),
    title="image classification",
), __name__)
