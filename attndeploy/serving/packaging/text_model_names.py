"""The names a text model and its readers share: its input, its suffix, its tokenizer and family
files and its `config.pbtxt` parameters (the ONNX metadata key of the tokenizer is
`runtime.names`'). In a module of their own so that the generated `model.py` (`model_template`)
and the text model's writer (`text_model`) both read them without importing each other."""

from __future__ import annotations

TEXT = "text"
TEXT_SUFFIX = "_text"
TOKENIZER_FILE = "tokenizer.json"
# Which shipped module decodes the model's family: {"module": dotted name, "path": its copy's
# path in the version folder} (a file, not a config parameter: the config is held unchanged).
FAMILY_RUNTIME_FILE = "family_runtime.json"

PARAM_ID_MODEL = "ID_MODEL"  # the id model this text model calls (marks a text model)
PARAM_ID_VERSION = "ID_MODEL_VERSION"
PARAM_TRUNCATE = "TRUNCATE"  # "true": keep the first MAX_SEQ tokens of a longer text
PARAM_MAX_TEXT_BYTES = "MAX_TEXT_BYTES"  # a longer text (UTF-8 bytes) is refused, untokenized

# How the text model runs its id model: the python flavour's ONNX file loaded into the text
# model's own process (no second hop through the server), or a BLS request to the id model.
PARAM_ID_MODEL_CALL = "ID_MODEL_CALL"
# "true": the id model answers `tag_ids` (a CRF tagger's Viterbi path), which decide the tags;
# absent otherwise, so every other text model's config reads as before
PARAM_TAG_IDS = "TAG_IDS_OUTPUT"
CALL_ONNXRUNTIME = "onnxruntime"
CALL_BLS = "bls"
ID_MODEL_CALLS = (CALL_ONNXRUNTIME, CALL_BLS)
