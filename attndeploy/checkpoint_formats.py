"""Checkpoint formats beyond attndeploy's own, as plug-ins keyed by their `config.json` tag.

A checkpoint whose `config.json` holds a registered tag (a Hugging Face model converted by
`attndeploy.integrations` holds `"hf"`) is read and exported by the plug-in registered for that
tag; core modules (`checkpoint`, `export.exporter`) ask this registry and never name the plug-in.

Plug-ins register as package entry points (pyproject.toml, groups `READERS` and `EXPORTERS`,
the name being the tag), so an installed package extends attndeploy without core knowing it;
`register` adds one in process (a test, a notebook). This module imports nothing of attndeploy
above its base: any layer may ask it.

- a reader is `read(path, raw_config, weights_sha256) -> Checkpoint`;
- an exporter is `export(checkpoint_dir, out_path, ExportOptions) -> ExportResult`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

READERS = "attndeploy.checkpoint_readers"
EXPORTERS = "attndeploy.checkpoint_exporters"
GROUPS = (READERS, EXPORTERS)

_registered: dict[tuple[str, str], Callable[..., Any]] = {}


def register(group: str, tag: str, plugin: Callable[..., Any]) -> None:
    """Register `plugin` as the reader or exporter (`group`) of checkpoints tagged `tag`."""
    if group not in GROUPS:
        raise ValueError(f"unknown plug-in group {group!r}; valid: {', '.join(GROUPS)}")
    _registered[(group, tag)] = plugin


@functools.cache
def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    return {entry.name: entry for entry in metadata.entry_points(group=group)}


def tags(group: str = READERS) -> set[str]:
    """Every tag with a plug-in of `group`."""
    return {tag for g, tag in _registered if g == group} | set(_entry_points(group))


def tag_of(raw_config: Mapping[str, Any]) -> str | None:
    """The registered format tag `config.json` holds, or None for attndeploy's own format."""
    found = sorted(key for key in raw_config if key in tags(READERS))
    return found[0] if found else None


def plugin(group: str, tag: str) -> Callable[..., Any]:
    """The reader or exporter of `tag`; LookupError when none is registered or installed."""
    if (group, tag) in _registered:
        return _registered[(group, tag)]
    entry = _entry_points(group).get(tag)
    if entry is None:
        raise LookupError(f"no {group.rpartition('_')[2][:-1]} is installed for checkpoints "
                          f"tagged {tag!r} (a package registers one as an entry point of "
                          f"{group}; if attndeploy itself writes them, re-install it: "
                          "pip install -e .)")
    return entry.load()


def checkpoint_head(checkpoint: Path) -> str | None:
    """The `model.head` a checkpoint folder's config.json records, or None where it cannot be
    read (no torch: the CLI asks it before choosing a family's path)."""
    from attndeploy.errors import CheckpointError
    from attndeploy.jsonread import read_json_file

    try:
        raw = read_json_file(Path(checkpoint) / "config.json", error=CheckpointError)
    except (OSError, CheckpointError):
        return None
    model = raw.get("model") if isinstance(raw, dict) else None
    head = model.get("head") if isinstance(model, dict) else None
    return head if isinstance(head, str) else None
