"""The op set is collected in `attndeploy.variants.op_registry` (below the exporter, which the
variants' layers must not import); this old path re-exports it."""

from attndeploy.variants.op_registry import (  # noqa: F401  (re-exported)
    DEFAULT_OPSET,
    SUPPORTED_OPSETS,
    OpSpec,
    check_opset,
    custom_translation_table,
    function_protos,
    op_spec,
    op_specs,
    torch_ops,
)
