"""token-classification: a text in, one tag per token out (a per-token head, no pooling)."""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family


def _outputs(num_labels: int, tag_head: str = "softmax", **options: object) -> tuple:
    """The per-token logits (a CRF tagger's emissions) and, for a CRF tagger
    (`ModelConfig.tag_head == "crf"`), the best tag ids its Viterbi finds inside the graph."""
    from attndeploy.interface import BATCH, SEQ, TAGS_OUTPUT, TensorSpec  # onnx: on use
    from attndeploy.runtime.names import LOGITS

    logits = TensorSpec(LOGITS, "float32", (BATCH, SEQ, num_labels), "unnormalised scores")
    if tag_head != "crf":
        return (logits,)
    return (logits, TensorSpec(TAGS_OUTPUT, "int64", (BATCH, SEQ),
                               "the best tag ids (the CRF's Viterbi path), 0 at padding"))


SPEC = register_family(FamilySpec(
    name="token-classification",
    head="tagging",
    order=1,
    summary="a text in, one tag per token out",
    outputs=_outputs,
    hf_heads=("ForTokenClassification",),
    title="token classification",
), __name__)
