"""Reference PyTorch attention variants, registered by name.

Importing this package registers every variant: `standard`, `qvi`, `ganet`, `evolving`.
"""

from attndeploy.variants import evolving, ganet, qvi, standard  # noqa: F401  (registration)
from attndeploy.variants.registry import get_variant, registered_variants, variant_names

__all__ = ["get_variant", "registered_variants", "variant_names"]
