"""Tiny BERT, RoBERTa and DistilBERT models built from configs (nothing is downloaded).

`make_model(model_type, kind)` builds a fresh random model of one of the three families;
`CLASSES` names the heads (`seq` sequence classification, `tok` token classification, `base`
the bare encoder, `mlm`, `qa`). Every model has 2 layers of width 32 with 4 heads unless asked
otherwise, so an export takes a few seconds.
"""

from __future__ import annotations

from typing import Any

import torch

MODEL_TYPES = ("bert", "roberta", "distilbert")
VARIANTS = ("standard", "qvi", "ganet", "evolving")
VOCAB = 120
NUM_LABELS = 3
CLASSES = {
    "bert": {"base": "BertModel", "seq": "BertForSequenceClassification",
             "tok": "BertForTokenClassification", "mlm": "BertForMaskedLM",
             "qa": "BertForQuestionAnswering"},
    "roberta": {"base": "RobertaModel", "seq": "RobertaForSequenceClassification",
                "tok": "RobertaForTokenClassification", "mlm": "RobertaForMaskedLM",
                "qa": "RobertaForQuestionAnswering"},
    "distilbert": {"base": "DistilBertModel", "seq": "DistilBertForSequenceClassification",
                   "tok": "DistilBertForTokenClassification", "mlm": "DistilBertForMaskedLM",
                   "qa": "DistilBertForQuestionAnswering"},
}


def make_config(model_type: str, *, layers: int = 2, width: int = 32, heads: int = 4,
                positions: int = 64, **extra: Any) -> Any:
    import transformers

    common = {"vocab_size": VOCAB, "num_labels": NUM_LABELS} | extra
    if model_type == "distilbert":
        return transformers.DistilBertConfig(
            dim=width, n_layers=layers, n_heads=heads, hidden_dim=2 * width,
            max_position_embeddings=positions, **common)
    config_class = transformers.BertConfig if model_type == "bert" else transformers.RobertaConfig
    if model_type == "roberta":  # positions start after the pad id: keep `positions` usable
        common.setdefault("pad_token_id", 0)
        positions += 1
    return config_class(hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=2 * width, max_position_embeddings=positions, **common)


def make_model(model_type: str, kind: str = "seq", **config: Any) -> torch.nn.Module:
    import transformers

    cls = getattr(transformers, CLASSES[model_type][kind])
    if kind == "qa":
        config.setdefault("num_labels", 2)  # start and end logits
    return cls(make_config(model_type, **config)).eval()


def padded_batch(batch: int, seq: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids in [2, VOCAB) and a right-padded mask (row i keeps seq - i tokens, at least 1);
    pads hold id 0."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (batch, seq), generator=generator)
    lengths = torch.tensor([max(1, seq - i) for i in range(batch)])
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return ids * mask, mask


LABELS = ("neg", "neu", "pos")


def save_converted_checkpoint(out, model_type: str, variant: str, *, kind: str = "seq",
                              max_seq: int = 32, tokenizer=None, **config: Any):
    """A random converted model saved as an attndeploy checkpoint; returns its directory."""
    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.transformers import convert

    model = convert(make_model(model_type, kind, **config), variant)
    classifier = HFClassifier(model, model_config_of(model, max_seq))
    return save_hf_checkpoint(classifier, out, label_names=LABELS, tokenizer=tokenizer)
