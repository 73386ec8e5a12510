"""Option groups: each group declares the options of what it configures and parses their values
into the library's config; a command composes its groups (`base.takes_options`).

`attndeploy train`'s groups: the model (`model.py`), the data (`data.py`), the training recipe
(`recipe.py`), the variants' own options, read from their specs (`variants.py`), the Hugging
Face source (`hf.py`) and the outputs (`outputs.py`).
"""
