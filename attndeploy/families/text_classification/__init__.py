"""text-classification: a text in, one label out (a sequence-level head over the pooled encoder)."""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family


def _outputs(num_labels: int, **options: object) -> tuple:
    from attndeploy.interface import BATCH, TensorSpec  # onnx: imported on use
    from attndeploy.runtime.names import LOGITS

    return (TensorSpec(LOGITS, "float32", (BATCH, num_labels), "unnormalised scores"),)


SPEC = register_family(FamilySpec(
    name="text-classification",
    head="classification",
    order=0,
    summary="a text in, one label out",
    outputs=_outputs,
    architectures=("transformer", "bilstm"),
    pooled=True,
    hf_heads=("ForSequenceClassification",),
    title="text classification",
), __name__)
