"""`OpSpec` lives in `attndeploy.opspec.spec` (below the variants that declare their ops with it);
this old path re-exports it."""

from attndeploy.opspec.spec import (  # noqa: F401  (re-exported)
    DEFAULT_OPSET,
    SUPPORTED_OPSETS,
    OpSpec,
    check_opset,
)
