"""Packaging: an exported model -> a Triton model repository (`repository.py`), its
configs (`model_config.py`), generated `model.py` files (`model_template.py`, `templates/`),
text models (`text_model.py`), models of any interface (`generic.py`) and the offline
check of a repository (`check_repo.py`)."""
