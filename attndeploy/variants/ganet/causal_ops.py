"""Deprecated alias: the causal ops are registered in `ops.OPS` (docs/ops.md), which also names
them `CAUSAL_OPS`. This module stays only because tests/variants/test_functional.py still reads
`causal_ops.CAUSAL_OPS`; delete it once that test reads `ops.OPS` alone."""

from __future__ import annotations

from attndeploy.variants.ganet.ops import CAUSAL_OPS  # noqa: F401  (re-exported)
