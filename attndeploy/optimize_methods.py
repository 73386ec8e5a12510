"""`optimize`'s methods and defaults, in a module that imports nothing (the CLI reads them at
start; `attndeploy.optimize` itself takes a second to import)."""

from __future__ import annotations

# transformers: onnxruntime's transformer optimizer (what Optimum runs);
# onnxruntime: onnxruntime's own optimized graph (ORT_ENABLE_* levels)
METHODS = ("transformers", "onnxruntime")
DEFAULT_METHOD = "transformers"
