"""A small encoder-decoder translation model with every variant (issue #51): the translation
family's model. `config` (Seq2SeqConfig), `cross` (cross-attention per variant), `model`
(Seq2Seq: encoder, decoder with the causal self-attention cache and the cross-attention K/V),
`tokenizer` (a BPE learnt on the training pairs), `fit` (training and BLEU/chrF beside the
baselines), `checkpoint`, `pairs` (the fixed held-out split), `metrics` (BLEU, chrF,
baselines)."""
