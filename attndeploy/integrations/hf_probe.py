"""The linear-probe baseline of a pretrained fine-tune: the encoder frozen, as it was loaded,
its last hidden states mean-pooled over each text's pieces ([CLS] and [SEP] included, pads
not: as sentence-transformers pools), and logistic regression on them
(`training.probe`). Fitted on the training and validation texts, scored on the held-out ones,
beside naive Bayes: `probe_accuracy` and `probe_l2` join the run's metrics.

One forward pass over each text, with no gradient: a few seconds for MiniLM on a few thousand
short texts. A model built from a config (random weights) has nothing to probe: no metrics.
"""

from __future__ import annotations

from typing import Any

import torch

from attndeploy.data import TextDataset
from attndeploy.integrations.hf_data import HFSource, HFTrainingData
from attndeploy.training.probe import probe_metrics

BATCH_SIZE = 64


def load_frozen_encoder(source: HFSource) -> torch.nn.Module:
    """The source's pretrained encoder as saved (no head, no conversion), in eval mode. Built
    from the source's checked config (`hf_data.load_source`: no Hub kernel is ever fetched),
    never from the folder's config.json as it stands."""
    import copy

    import transformers

    encoder = transformers.AutoModel.from_pretrained(
        str(source.weights), config=copy.deepcopy(source.config), local_files_only=True,
        use_safetensors=True)
    return encoder.eval()


@torch.no_grad()
def mean_pooled(encoder: torch.nn.Module, dataset: TextDataset,
                batch_size: int = BATCH_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(features [N, H], labels [N]) of `dataset`, in its order."""
    features, labels = [], []
    for input_ids, attention_mask, batch_labels in dataset.batches(batch_size, shuffle=False):
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        weights = attention_mask.to(hidden.dtype)[:, :, None]  # [B, T, 1]: pads weigh 0
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)  # [B, H]
        features.append(pooled)
        labels.append(batch_labels)
    return torch.cat(features), torch.cat(labels)


def fit_hf_probe(source: HFSource, data: HFTrainingData, *, seed: int = 0) -> dict[str, Any]:
    """`probe_accuracy` and `probe_l2` of the frozen encoder on `data`, or {} without pretrained
    weights."""
    if source.weights is None:
        return {}
    encoder = load_frozen_encoder(source)
    fit_sets = [data.train_set] + ([data.val_set] if data.val_set is not None else [])
    pooled = [mean_pooled(encoder, dataset) for dataset in fit_sets]
    fit_features = torch.cat([features for features, _ in pooled])  # [N_fit, H]
    fit_labels = torch.cat([labels for _, labels in pooled])  # [N_fit]
    eval_features, eval_labels = mean_pooled(encoder, data.eval_set)
    return probe_metrics(fit_features, fit_labels, eval_features, eval_labels,
                         len(data.label_names), seed=seed)
