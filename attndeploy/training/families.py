"""The training part of a model family (torch: data, head, loss, metrics, baseline), imported by
name from its spec (`attndeploy.families.registry`).

A family's training part sits at the model layer, where the models build their head and the
datasets check their labels with it; its loader is `attndeploy.models.families.training_part`,
re-exported here for the train layer's modules.

The protocol: a family's `training.py` defines, at module level (shapes: B batch, T tokens, D
the encoder's width, C = `config.num_labels`):

the model
  build_head(config, width, gated) -> nn.Module
      The head over the encoder's output, built after the encoder (its parameters come last,
      in the order it creates them). `gated`: the variant gates (the head may apply them).
  apply_head(head, h [B, T, D], context: LayerContext) -> (logits, applied gates [B, T] | None)
      The model's `logits` output (the family spec's `outputs`), and the gates a pooling op
      applied (None: the base model derives them from the gate logits).
  loss(logits, labels, label_smoothing=0.0) -> scalar Tensor
      The training loss; evaluation calls it with no smoothing.
  name_labels(head, config, label_names)   optional: what the head derives from the label
      names, set when a model is built with them (`build_model(config, label_names)`:
      training and loading a checkpoint); token-classification's CRF scheme constraint.
labels (`attndeploy.data.TextDataset`)
  LABEL_DTYPE                       the labels' torch dtype.
  check_label_names(label_names)    DataError unless the names suit the family.
  check_labels(labels, attention_mask [N, T], num_labels)   DataError naming what is wrong.
  labels_tensor(values, width) -> Tensor   one value per example (a class index, a tag list,
                                    a float) -> the labels of N examples padded to `width`.
  batch_labels(labels [B, ...], width) -> Tensor   a batch's labels trimmed to its width.
  join_labels(first, second, width) -> Tensor      two sets' labels, padded to `width`.
evaluation (`attndeploy.training.evaluation.evaluate`)
  metric_sums(logits, labels) -> dict[str, float]  one batch's sums (added up over batches).
  metrics(sums) -> dict[str, float]                the metrics, before `loss` and `examples`.
  PRIMARY_METRIC: str, GREATER_IS_BETTER: bool     what selection and the baseline compare.
  fit_baseline(fit_docs, fit_labels: list[Tensor], eval_docs, eval_labels, label_names)
      -> dict: the baseline's metrics (`baseline`, `baseline_<PRIMARY_METRIC>`, ...) or {}.
`train --data FILE` (`attndeploy.data.jsonl`)
  JSONL_KEYS: tuple[str, ...]       the keys of a line; () reads no file. The first family (in
                                    order) whose keys a file's first object holds reads it.
  read_example(obj, where) -> (text, target)      DataError naming `where` (file:line).
  label_names_of(targets, path) -> tuple[str, ...]  the label names a file's targets give.
  label_encoder(label_names) -> (target, where) -> value   a target as `labels_tensor` takes it.
  jsonl_line(text, target) -> dict   an example (its target as `read_example` gave it) written
                                    back as a line: `held-out` writes the held-out split.
"""

from __future__ import annotations

from attndeploy.models.families import training_part

# The names every family's training part defines (the protocol above) ...
REQUIRED = ("build_head", "apply_head", "loss", "LABEL_DTYPE", "check_label_names",
            "check_labels", "labels_tensor", "batch_labels", "join_labels", "metric_sums",
            "metrics", "PRIMARY_METRIC", "GREATER_IS_BETTER", "fit_baseline", "JSONL_KEYS")
# ... and those a part whose JSONL_KEYS is not empty defines too (it reads `train --data FILE`)
JSONL_READER = ("read_example", "label_names_of", "label_encoder", "jsonl_line")

__all__ = ["JSONL_READER", "REQUIRED", "training_part"]
