"""text-generation: a text in, its continuation out, one token at a time (issue #49).

A decoder-only causal language model (`attndeploy.models.decoder`) with any variant's causal
attention and its cache. Unlike the encoder families it has no label head over an encoder: its
training part trains the whole decoder itself (`train_texts`, the hook `attndeploy train
--data FILE` hands a `{"text": ...}` file to), `attndeploy export` and `validate` hand its
checkpoints to `attndeploy.export.decoder` and `attndeploy.validate.decoder` (the checks part's
`export_checkpoint` and `validate_checkpoint`), and `attndeploy generate` runs the exported
graph with the loop of `attndeploy.generation`.

Its model-level output is `logits` [batch, seq, vocab] (`num_labels` is the vocabulary), then
the present state (`present.{layer}.{entry}`), which the export's metadata lists.
"""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family


def _outputs(num_labels: int, **options: object) -> tuple:
    from attndeploy.interface import BATCH, SEQ, TensorSpec  # onnx: imported on use
    from attndeploy.runtime.names import LOGITS

    return (TensorSpec(LOGITS, "float32", (BATCH, SEQ, num_labels),
                       "next-token scores over the vocabulary"),)


SPEC = register_family(FamilySpec(
    name="text-generation",
    head="causal_lm",
    order=90,  # last: its one key, "text", is in every family's lines; those with more read first
    summary="a text in, its continuation out",
    outputs=_outputs,
    architectures=("decoder",),
    min_labels=2,
    hf_heads=(),
    title="text generation",
), __name__)
