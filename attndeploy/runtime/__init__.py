"""In-process inference on an exported model: onnxruntime and numpy, never torch.

    from attndeploy.runtime import InferenceModel
    model = InferenceModel("model.onnx")
    predictions = model.predict(["some text", "another text"])

`InferenceModel` (`model.py`) loads the file and reads labels, vocabulary, max_seq and variant
from its metadata (`metadata.py`); tokenizing and decoding (`text.py`, `tokenizer.py` for word
vocabularies, `wordpiece.py` for converted Hugging Face models) are the ones `attndeploy infer`
and served text models use too. Names are imported on first use, so that importing
`attndeploy.runtime.tokenizer` (training does) does not load onnxruntime.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EncodedText",
    "InferenceModel",
    "ModelMetadata",
    "Prediction",
    "TextError",
    "WordPieceTokenizer",
    "WordTokenizer",
    "parse_metadata",
]

DEFAULT_BATCH_SIZE = 32  # texts per onnxruntime call of `InferenceModel.predict`
# The largest text (UTF-8 bytes) that `predict`, `infer --text` and a served text model read:
# checked before tokenizing, so one huge "word" (one token, which max_seq never catches) costs
# nothing. About 10,000 English words; a model's max_seq sees far fewer.
DEFAULT_MAX_TEXT_BYTES = 64 * 1024

_HOMES = {
    "InferenceModel": "attndeploy.runtime.model",
    "ModelMetadata": "attndeploy.runtime.metadata",
    "parse_metadata": "attndeploy.runtime.metadata",
    "EncodedText": "attndeploy.runtime.text",
    "Prediction": "attndeploy.runtime.text",
    "TextError": "attndeploy.runtime.text",
    "WordTokenizer": "attndeploy.runtime.tokenizer",
    "WordPieceTokenizer": "attndeploy.runtime.wordpiece",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'attndeploy.runtime' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
