"""The model-level interface now lives in `attndeploy.interface` (torch-free, below every stage);
this path re-exports it for the modules that still import it from here."""

from attndeploy.interface import (  # noqa: F401  (re-exported)
    ATTENTION_MASK,
    BATCH,
    CLASSIFICATION,
    GATES,
    INPUT_IDS,
    LOGITS,
    SEQ,
    TAGGING,
    ModelInterface,
    TensorSpec,
    make_feed,
    model_interface,
)
