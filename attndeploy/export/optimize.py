"""The optimizer is its own stage, `attndeploy.optimize` (it sits above validation, whose
comparisons it reuses); this old path is the same module object, so imports and patches made
through it reach `attndeploy.optimize` itself."""

import sys

from attndeploy import optimize

sys.modules[__name__] = optimize
