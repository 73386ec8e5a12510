"""A family that makes its own inputs for `debug compare`, found by the family, not by a branch
on it: its checks part's hooks (`attndeploy.validate.families`; image-classification's are the
example, `families/image_classification/checks`):

- `debug_checkpoint(checkpoint, export, metadata, shapes, seed) -> (module, feeds, labels)`:
  the checkpoint's PyTorch model and the inputs to compare it with its export on (`metadata`:
  the export's attndeploy metadata, keys without the prefix, for the check that `export` is
  this checkpoint's);
- `checkpoint_feeds(checkpoint, shapes, seed) -> (feeds, labels)`: inputs drawn from the
  checkpoint alone (`--against` with a checkpoint);
- `random_feeds(metadata, shapes, seed, where) -> (feeds, labels)`: inputs drawn from an
  export's metadata alone (`--against` without a checkpoint).

A family without them (the text encoders) takes the common path: validate's token-id feeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attndeploy.checkpoint_formats import checkpoint_head
from attndeploy.errors import ConfigError


def _hook(head: str | None, name: str) -> Callable[..., Any] | None:
    from attndeploy.validate.families import checks_part

    if not head:
        return None
    try:
        part = checks_part(head)
    except ConfigError:  # an unknown head: the common path refuses it in its own words
        return None
    return getattr(part, name, None)


def checkpoint_hook(checkpoint: Path | str, name: str) -> Callable[..., Any] | None:
    """The checks part's `name` of the checkpoint's family, when it defines one."""
    return _hook(checkpoint_head(Path(checkpoint)), name)


def metadata_hook(metadata: Mapping[str, str], name: str) -> Callable[..., Any] | None:
    """The checks part's `name` of the family an export's metadata (`head`) names."""
    return _hook(metadata.get("head"), name)
