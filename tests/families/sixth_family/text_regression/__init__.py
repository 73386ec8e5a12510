"""text-regression, a sixth family that lives in this folder only: a text in, one number out.

Copied into a package tree as `attndeploy/families/text_regression/`, it is found like the
built-in families and goes through every stage (tests/families/test_sixth_family.py): its
declaration here, its decode and served fields in `runtime.py`, its head, loss, data, metrics and
baseline in `training.py`, what parity means for it in `checks.py`.
"""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family


def _outputs(num_labels: int, **options: object) -> tuple:
    from attndeploy.interface import BATCH, TensorSpec  # onnx: imported on use
    from attndeploy.runtime.names import LOGITS

    return (TensorSpec(LOGITS, "float32", (BATCH, num_labels), "the predicted value"),)


SPEC = register_family(FamilySpec(
    name="text-regression",
    head="regression",
    order=10,
    summary="a text in, one number out",
    outputs=_outputs,
    pooled=True,
    min_labels=1,
    title="text regression",
), __name__)
