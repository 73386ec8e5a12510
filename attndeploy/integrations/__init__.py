"""Integrations with other libraries (optional extras; nothing here is imported by the core).

- `attndeploy.integrations.transformers`: `convert(model, variant, **options)` swaps the
  self-attention of Hugging Face BERT, RoBERTa and DistilBERT encoders for an attndeploy variant,
  in place (`pip install "attndeploy[hf]"`).
- `attndeploy.integrations.hf_checkpoint`: converted models as attndeploy checkpoints, which
  `export`, `validate`, `package` and `serve` take like the built-in ones.
- `attndeploy.integrations.hf_tokenizer`: the WordPiece tokenizer those checkpoints carry.
- `attndeploy.integrations.hf_data` and `hf_train`: fine-tuning (`attndeploy train --hf-model ...`).
"""
