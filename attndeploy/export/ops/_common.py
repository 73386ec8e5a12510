"""The op bodies' shared helpers live in `attndeploy.opspec.bodies` (below the variants that use
them); this old path re-exports them."""

from attndeploy.opspec.bodies import (  # noqa: F401  (re-exported)
    ATTNDEPLOY,
    BODY_OPSET,
    DOMAIN,
    DOMAIN_VERSION,
    HELPERS,
    INTERNAL,
    HardGates,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
    ZeroPads,
)
