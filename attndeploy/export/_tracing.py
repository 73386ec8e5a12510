"""Deprecated: `attndeploy.export.tracing` (public since the Hugging Face exporter became a
plug-in that uses it). This alias is the same module and goes in the next release."""

import sys
import warnings

from attndeploy.export import tracing

warnings.warn("attndeploy.export._tracing is now attndeploy.export.tracing", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = tracing
