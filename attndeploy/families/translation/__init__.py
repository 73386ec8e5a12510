"""translation: a sentence in, its translation out (issue #51; docs/translation.md).

An encoder-decoder (`attndeploy.models.seq2seq`) with any variant in encoder self-attention,
causal decoder self-attention and cross-attention. Like text-generation it has no label head
over an encoder, so three stages hand it their whole job through the family hooks
(`attndeploy/cli/family_hooks.py`): its training part's `train_texts` (`attndeploy train
--data FILE` on `{"source": ..., "target": ...}` lines) and its checks part's
`export_checkpoint` and `validate_checkpoint`. `attndeploy generate` translates with the
exported encoder and decoder graphs (greedy or beam search, `attndeploy.generation.seq2seq`).

Its model-level output is the decoder's `logits` [batch, seq, vocab] (`num_labels` is the
vocabulary), then the changed state (`present.{layer}.decoder.{entry}`, ...).
"""

from __future__ import annotations

from attndeploy.families.registry import FamilySpec, register_family


def _outputs(num_labels: int, **options: object) -> tuple:
    from attndeploy.interface import BATCH, SEQ, TensorSpec  # onnx: imported on use
    from attndeploy.runtime.names import LOGITS

    return (TensorSpec(LOGITS, "float32", (BATCH, SEQ, num_labels),
                       "next-token scores over the target vocabulary"),)


SPEC = register_family(FamilySpec(
    name="translation",
    head="translation",
    order=80,
    summary="a sentence in, its translation out",
    outputs=_outputs,
    architectures=("seq2seq",),
    min_labels=2,
    hf_heads=(),
), __name__)
