"""A small decoder-only causal language model for every variant, with its cache (issue #49):
its config (`config.py`), the model (`model.py`), its checkpoint (`checkpoint.py`), the training
loop (`fit.py`) and the trigram baseline (`ngram.py`)."""
