"""The attention variants: one package per variant, each registering one `VariantSpec`.

    variants/<name>/__init__.py   its spec: layer, config, ops, extra outputs (light, no torch)
    variants/<name>/config.py     its sub-config dataclass (`ModelConfig.<name>`), if any
    variants/<name>/layer.py      its `attndeploy.nn` layer
    variants/<name>/reference.py  the PyTorch reference of each of its ops
    variants/<name>/ops.py        its ops of the `attndeploy` ONNX set, one `op_*.py` per op
    functional.py                 every op's reference, re-exported (the stable functional API)
    api.py                        the public extension API (AttentionBase, GateState, call_op, ...)
    _common.py                    what every layer shares (projections, heads, masks, call_op)

Importing this package is light; `variant_specs()` finds the variant packages.
"""

from attndeploy.variants.registry import (
    VariantSpec,
    get_variant,
    register_variant,
    registered_variants,
    variant_names,
    variant_spec,
    variant_specs,
)

__all__ = [
    "VariantSpec",
    "get_variant",
    "register_variant",
    "registered_variants",
    "variant_names",
    "variant_spec",
    "variant_specs",
]
