"""Tiny BERT, RoBERTa and DistilBERT models built from configs (nothing is downloaded).

`make_model(model_type, kind)` builds a fresh random model of one of the three families;
`CLASSES` names the heads (`seq` sequence classification, `tok` token classification, `base`
the bare encoder, `mlm`, `qa`). Every model has 2 layers of width 32 with 4 heads unless asked
otherwise, so an export takes a few seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.helpers import threshold_below_median

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
                              max_seq: int = 32, tokenizer=None,
                              options: dict[str, Any] | None = None, **config: Any):
    """A random converted model saved as an attndeploy checkpoint; returns its directory.
    `options`: the variant's, for `convert`; `config`: the model's sizes."""
    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.transformers import convert

    model = convert(make_model(model_type, kind, **config), variant, warm_start=False,
                    **(options or {}))
    classifier = HFClassifier(model, model_config_of(model, max_seq))
    return save_hf_checkpoint(classifier, out, label_names=LABELS, tokenizer=tokenizer)


# --------------------------------------------------------------------------- text checkpoints

# WordPiece corpus of the text checkpoints: short words, so unseen words split into `##` pieces.
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a good day to deploy attention models",
    "bad weather stopped the training run",
    "evolving attention keeps the maps of earlier layers",
    "gates close on tokens that carry no evidence",
    "alpha bravo charlie delta echo foxtrot golf hotel",
]
# Texts that the tests send: seen words, unseen words (`##` pieces), capitals and accents
# (normalized away), punctuation, a character outside the alphabet ([UNK]) and a long text.
TEXTS = [
    "the quick brown fox", "Good DAY!", "bad weather", "Évolving attention, layers.",
    "gates close", "alpha", "unforeseen tokenization", "delta € echo",
    "a good day to deploy attention models and a bad day to train them",
    "golf hotel charlie", "dog", "the lazy dog jumps over the quick brown fox",
]


# Room for every word of CORPUS as one piece (about 200 pieces are learned).
TEXT_VOCAB = 400


def train_wordpiece(vocab_size: int = TEXT_VOCAB):
    from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer

    return WordPieceTokenizer.train(CORPUS * 3, vocab_size=vocab_size)


# Weights drawn from N(0, 0.5²) instead of the default N(0, 0.02²): at 0.02 a random encoder maps
# every text to nearly the same logits (spread ~1e-5 across TEXTS), and a label test would pass for
# a model that ignores its input; at 0.5 the logits of different texts differ by ~2.
INIT_RANGE = 0.5


@torch.no_grad()
def spread_the_answers(classifier: Any, tokenizer: Any, texts: list[str], max_seq: int) -> None:
    """Centre the logits of `texts` on 0 per label (the head's bias moves by their mean), so
    that the texts do not all get one label; for GA-Net also move the gate network's final bias
    to just under the median gate logit of the texts' tokens, so that about half of the gates
    close and no token's logit sits at the threshold."""
    ids, mask = (torch.from_numpy(a) for a in tokenizer.encode_batch(texts, max_seq=max_seq))
    if classifier.is_gated:
        (network,) = [m for name, m in classifier.named_modules()
                      if name.endswith("gate_network")]
        logits = classifier(ids, mask, details=True)["gate_logits"][mask.bool()]
        network.score.bias -= threshold_below_median(logits)
    head = [m for m in classifier.modules()
            if isinstance(m, torch.nn.Linear) and m.out_features == len(LABELS)][-1]
    head.bias -= classifier(ids, mask)["logits"].mean(0)  # [C]


def save_text_checkpoint(out, model_type: str, variant: str, *, max_seq: int = 32,
                         **config: Any):
    """A converted classifier with a trained WordPiece tokenizer (so text in, label out works),
    wide initial weights (`INIT_RANGE`) and answers spread over `TEXTS` (`spread_the_answers`);
    returns the checkpoint directory."""
    from attndeploy.integrations.hf_checkpoint import (
        HFClassifier,
        model_config_of,
        save_hf_checkpoint,
    )
    from attndeploy.integrations.transformers import convert

    tokenizer = train_wordpiece()
    config.setdefault("initializer_range", INIT_RANGE)
    config.setdefault("vocab_size", TEXT_VOCAB)
    model = convert(make_model(model_type, "seq", **config), variant, warm_start=False)
    classifier = HFClassifier(model, model_config_of(model, max_seq)).eval()
    spread_the_answers(classifier, tokenizer, TEXTS, max_seq)
    return save_hf_checkpoint(classifier, out, label_names=LABELS, tokenizer=tokenizer)


def pretrained_folder(folder: Path) -> Path:
    """A tiny `save_pretrained` folder with weights (safetensors) and a WordPiece tokenizer."""
    import transformers

    from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.train(["w1 w2 alpha amber bravo cobalt w3 w4 good bad day"] * 3)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=80)
    transformers.BertModel(config).save_pretrained(str(folder))
    tokenizer._tokenizer.save(str(folder / "tokenizer.json"))
    return folder
