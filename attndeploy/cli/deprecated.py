"""Old command-line forms that still work, rewritten to the current ones with a warning.

`--json` is a flag everywhere (the command's result as one JSON document on stdout); a JSON
report written to a file is `--json-out PATH`. `validate` and `loadtest` used to take
`--json PATH` (and loadtest `--json -` for stdout): for these two commands `--json PATH` becomes
`--json-out PATH` and `--json -` becomes `--json`, each with one warning line on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence

JSON_PATH_COMMANDS = frozenset({"validate", "loadtest"})
JSON_PATH_WARNING = "--json PATH is deprecated; use --json-out PATH"


def _is_positional(command: str, value: str) -> bool:
    """Whether `--json VALUE` is the flag followed by a positional argument of `command`.

    validate's positional arguments are a checkpoint folder and an ONNX file: `--json ckpt
    model.onnx` is the flag. loadtest takes none, so any value there is the old report path.
    """
    if command != "validate":
        return False
    from pathlib import Path

    return value.endswith(".onnx") or Path(value).is_dir()


def rewrite_json_path(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the arguments with old `--json PATH` forms rewritten, the warnings to print)."""
    out = list(args)
    if not out or out[0] not in JSON_PATH_COMMANDS:
        return out, []
    command = out[0]
    rewritten = [command]
    warned = False
    i = 1
    while i < len(out):
        arg = out[i]
        if arg == "--":  # everything after it is positional
            rewritten.extend(out[i:])
            break
        value: str | None = None
        if arg.startswith("--json="):
            value, step = arg.split("=", 1)[1], 1
        elif arg == "--json" and i + 1 < len(out):
            candidate = out[i + 1]
            if candidate == "-" or not (candidate.startswith("-")
                                        or _is_positional(command, candidate)):
                value, step = candidate, 2
        if value is None:
            rewritten.append(arg)
            i += 1
            continue
        rewritten.extend(["--json"] if value == "-" else ["--json-out", value])
        warned = True
        i += step
    return rewritten, [JSON_PATH_WARNING] if warned else []
