"""The model vocabulary: every name an exported attndeploy model carries, spelled once.

The metadata keys of its `metadata_props` (all under `META_PREFIX`), the names of the tensors of
the model-level interface (docs/ops.md, "Model-level interface") and the custom ONNX domain of
attndeploy's ops. Every stage that writes or reads a model imports them from here: this module is
in the lowest torch-free layer and imports nothing, so the exporter, the optimizer, the
quantizer, the debugger, the packager, the load tester and the CLI all can.

What the keys hold (the exporter's `build_metadata`, `generic.py` for a user's model):

| key | value |
|---|---|
| `META_VARIANT` | the variant's name |
| `META_FAMILY`, `META_HEAD` | the model config's family and head |
| `META_VERSION` | the attndeploy that exported it (every export, a user's model's too) |
| `META_CONFIG` | the model config, JSON |
| `META_WEIGHTS` | the checkpoint weights' SHA-256 |
| `META_LABELS` | the label names, a JSON list |
| `META_MAX_SEQ` | the export's own limit (`export --max-seq`), at most the config's |
| `META_TOKENIZER` | the tokenizer record, JSON `{"type": ..., ...}`, or "" without one |
| `META_OPSET`, `META_DOMAIN_VERSION` | the standard opset and the attndeploy domain's version |
| `META_DTYPE`, `META_INLINED` | `float32`/`float16`; `true` when the functions were inlined |
| `META_DYNAMIC_AXES`, `META_DIM_BOUNDS` | a user's model's dynamic dims and their bounds, JSON |
| `META_USER_MODEL` | the MODULE:FACTORY a user's model was exported from |
| `META_OPTIMIZED` | what `attndeploy optimize` ran, JSON |
| `META_QUANTIZATION` | how `attndeploy quantize` quantized it, JSON |
| `META_HF_ARCHITECTURE`, `META_HF_MODEL_TYPE` | a converted Hugging Face model's origin |
| `META_CONTRACT_VERSION` | the prediction contract its predictions follow (`runtime.contract`) |
"""

from __future__ import annotations

META_PREFIX = "attndeploy."

META_VARIANT = META_PREFIX + "variant"
META_FAMILY = META_PREFIX + "family"
META_HEAD = META_PREFIX + "head"
META_VERSION = META_PREFIX + "version"
META_CONFIG = META_PREFIX + "config"
META_WEIGHTS = META_PREFIX + "weights_sha256"
META_LABELS = META_PREFIX + "labels"
META_MAX_SEQ = META_PREFIX + "max_seq"
META_TOKENIZER = META_PREFIX + "tokenizer"
META_OPSET = META_PREFIX + "opset"
META_DOMAIN_VERSION = META_PREFIX + "domain_version"
META_DTYPE = META_PREFIX + "dtype"
META_INLINED = META_PREFIX + "inlined"
META_DYNAMIC_AXES = META_PREFIX + "dynamic_axes"
META_DIM_BOUNDS = META_PREFIX + "dim_bounds"
META_USER_MODEL = META_PREFIX + "user_model"
META_OPTIMIZED = META_PREFIX + "optimized"
META_QUANTIZATION = META_PREFIX + "quantization"
META_HF_ARCHITECTURE = META_PREFIX + "hf_architecture"
META_HF_MODEL_TYPE = META_PREFIX + "hf_model_type"
META_CONTRACT_VERSION = META_PREFIX + "contract_version"

# The model-level interface: the inputs (int64 [batch, seq]) and outputs of every exported model
# (`attndeploy.interface` declares their dtypes and dims).
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
LOGITS = "logits"
GATES = "gates"  # a gated variant's output: whether a model is gated is read from it
TAG_IDS = "tag_ids"  # a CRF tagger's output: the best tag ids (Viterbi, inside the graph)

PRODUCER = "attndeploy"  # the ONNX producer_name of every model attndeploy writes
DOMAIN = "attndeploy"  # the custom ONNX domain of attndeploy's ops (`attndeploy::GatedAttention`)
