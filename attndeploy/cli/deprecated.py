"""Old command-line forms that still work for one release, rewritten to the current ones with a
warning on stderr (one line per old form).

Renamed options (`RENAMED_OPTIONS`), so that each option name has one meaning
(`options.MEANINGS`): `--model MODULE:FACTORY` is `--factory`, package's model `--name` is
`--model` (a served model's name everywhere), package's `--text/--no-text` flag is
`--text-model/--no-text-model` and its `--truncate-text` is `--truncate`, serve's `--timeout`
(waiting for the models) is `--ready-timeout`, loadtest's `--warmup N` is `--warmup-requests N`
and its `--batch` is `--batch-size`, predict's `--file` is `--text-file`, quantize's `--grid` is
`--shapes`, train's `--task` (a built-in data set) is `--dataset` (`--task` is the kind of model
in the Hugging Face ecosystem: text-classification, token-classification...), train's `--family`
(the encoder: transformer or bilstm) is `--architecture` (a model family is the kind of model,
`attndeploy.families`, which `--model-family` names), and check-repo's
repository is `--repo` (a positional argument before).

`--json` is a flag everywhere (the command's result as one JSON document on stdout); a JSON
report written to a file is `--json-out PATH`. `validate` and `loadtest` used to take
`--json PATH` (and loadtest `--json -` for stdout): for these two commands `--json PATH` becomes
`--json-out PATH` and `--json -` becomes `--json`, each with one warning line on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# command -> {old option: its current name}
RENAMED_OPTIONS: dict[str, dict[str, str]] = {
    "export": {"--model": "--factory"},
    "validate": {"--model": "--factory"},
    "debug": {"--model": "--factory"},
    "package": {"--name": "--model", "--text": "--text-model", "--no-text": "--no-text-model",
                "--truncate-text": "--truncate"},
    "serve": {"--timeout": "--ready-timeout"},
    "loadtest": {"--warmup": "--warmup-requests", "--batch": "--batch-size"},
    "predict": {"--file": "--text-file"},
    "quantize": {"--grid": "--shapes"},
    "train": {"--task": "--dataset", "--family": "--architecture"},
}
# command -> the option its old positional argument now is
POSITIONAL_TO_OPTION: dict[str, str] = {"check-repo": "--repo"}

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


def rewrite_deprecated(args: Sequence[str], value_options: Callable[[str], set[str]]
                       ) -> tuple[list[str], list[str]]:
    """(the arguments with every old form rewritten, the warnings to print).

    `value_options(command)` is the set of the command's (current) option names that take a
    value: the token after one of them is its value, never an option to rename (`predict
    --text --file` classifies the text "--file").
    """
    out, warnings = rewrite_json_path(args)
    if not out:
        return out, warnings
    command = out[0]
    renames = RENAMED_OPTIONS.get(command, {})
    positional = POSITIONAL_TO_OPTION.get(command)
    if not renames and positional is None:
        return out, warnings
    valued = value_options(command)
    rewritten = [command]
    moved = positional is None or positional in out[1:]  # the positional's option given
    i = 1
    while i < len(out):
        arg = out[i]
        if arg == "--":
            rewritten.extend(out[i:])
            break
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in renames:
            new = renames[name]
            warnings.append(f"{name} is deprecated; use {new}")
            rewritten.append(new + eq + value)
            name = new
        elif not arg.startswith("-") and not moved:
            warnings.append(f"the repository as an argument of {command} is deprecated; use "
                            f"{positional} {arg}")
            rewritten.extend([positional, arg])  # type: ignore[list-item]
            moved = True
            i += 1
            continue
        else:
            rewritten.append(arg)
        if name in valued and not eq and i + 1 < len(out):
            rewritten.append(out[i + 1])  # its value, as it is
            i += 2
            continue
        i += 1
    return rewritten, list(dict.fromkeys(warnings))
