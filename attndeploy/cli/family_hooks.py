"""A family that handles a stage its own way, found by the family, not by a branch on it.

A family's part may define a hook a command hands its whole job to: `train_texts` in its
training part (`attndeploy train --data FILE` on the family's lines), `export_checkpoint` and
`validate_checkpoint` in its checks part (`attndeploy export` / `validate` on one of its
checkpoints). text-generation does (a decoder has no label head and exports with its cache);
the encoder families define none and take the common path.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attndeploy.checkpoint_formats import checkpoint_head
from attndeploy.errors import ConfigError


def checks_hook(checkpoint: Path, name: str) -> Callable[..., Any] | None:
    """The checks part's `name` of the checkpoint's family, when it defines one."""
    from attndeploy.validate.families import checks_part

    head = checkpoint_head(checkpoint)
    if head is None:
        return None
    try:
        part = checks_part(head)
    except ConfigError:
        return None
    return getattr(part, name, None)


def describe_export(folder: Path) -> dict[str, Any] | None:
    """`info` of an export folder (no config.json): the summary of the first family whose
    checks part's `describe_export` recognises it, or None."""
    from attndeploy.families.registry import family_specs
    from attndeploy.validate.families import checks_part

    for spec in family_specs():
        describe = getattr(checks_part(spec), "describe_export", None)
        summary = describe(folder) if describe is not None else None
        if summary is not None:
            return summary
    return None


def training_hook(head: str, name: str) -> Callable[..., Any] | None:
    """The training part's `name` of the family whose head is `head`, when it defines one."""
    from attndeploy.models.families import training_part

    return getattr(training_part(head), name, None)


def folder_hook(family: str | None) -> Callable[..., Any]:
    """`train_folder` of the family that trains on a folder (`--data DIR`): --model-family's,
    else the first in order whose training part defines one."""
    from attndeploy.errors import DataError
    from attndeploy.families.registry import family_spec, family_specs
    from attndeploy.models.families import training_part

    for spec in [family_spec(family)] if family else family_specs():
        hook = getattr(training_part(spec.head), "train_folder", None)
        if hook is not None:
            return hook
    raise DataError("--data names a folder, and no model family trains on one")


def report_trained(out: Path, metrics: dict[str, Any], summary: dict[str, Any],
                   json_output: bool) -> None:
    """A hook's trained checkpoint, as `train` reports one: JSON, or `name: value` lines."""
    from attndeploy.cli.output import console, print_json

    if json_output:
        print_json({"checkpoint": str(out), "metrics": metrics, "training": summary})
        return
    console.print(f"saved {out}")
    for name, value in {**metrics, **summary}.items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        console.print(f"  {name}: {shown}", highlight=False)


def print_summary(summary: dict[str, Any], json_output: bool) -> None:
    """A hook's result summary: JSON, or `name: value` lines."""
    from attndeploy.cli.output import console, print_json

    if json_output:
        print_json(summary)
        return
    for name, value in summary.items():
        console.print(f"{name}: {_shown(value)}", highlight=False, markup=False)


def _shown(value: Any, most: int = 6) -> str:
    """A value for a person: a long list as its count and its first and last items (a
    30-layer decoder has 60 cache inputs; --json gives them all)."""
    if isinstance(value, (list, tuple)) and len(value) > most:
        head = ", ".join(map(str, value[:most - 2]))
        return f"{len(value)}: {head}, ..., {value[-1]}"
    return str(value)


def report_validation(report: Any, json_output: bool, json_path: Path | None, *,
                      force: bool) -> None:
    """A hook's validation report (`to_dict`, `passed`, `failure`, `checks`): written to
    `json_path` when given, printed, then ValidationError (one line) unless it passed."""
    from attndeploy.cli.output import console, print_json
    from attndeploy.errors import ValidationError
    from attndeploy.fsutil import atomic_write_text, check_replaceable

    document = report.to_dict()
    if json_path is not None:
        check_replaceable(json_path, force=force)
        atomic_write_text(Path(json_path), json.dumps(document, indent=2) + "\n")
    if json_output:
        print_json(document)
    else:
        for check in report.checks:
            status = "[green]passed[/]" if check.passed else "[red]failed[/]"
            console.print(f"{check.name:>12}: {status} max error {check.max_error:.3g} "
                          f"(<= {check.tolerance:g}) {check.detail}", highlight=False)
    if not report.passed:
        raise ValidationError(report.failure())
    if not json_output:
        console.print("[bold green]validation passed[/]")
