"""token-classification: a text in, one tag per token out (a per-token head, no pooling)."""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family


def _outputs(num_labels: int) -> tuple:
    from attndeploy.interface import BATCH, SEQ, TensorSpec  # onnx: imported on use
    from attndeploy.runtime.names import LOGITS

    return (TensorSpec(LOGITS, "float32", (BATCH, SEQ, num_labels), "unnormalised scores"),)


SPEC = register_family(FamilySpec(
    name="token-classification",
    head="tagging",
    order=1,
    summary="a text in, one tag per token out",
    outputs=_outputs,
    hf_heads=("ForTokenClassification",),
    title="token classification",
), __name__)
