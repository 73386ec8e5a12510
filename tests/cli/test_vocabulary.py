"""One CLI vocabulary: the command tree, walked, holds every option name to one meaning
(`options.MEANINGS`), every default to the library's, and every old spelling
(`deprecated.RENAMED_OPTIONS`) to a warning and the current name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import typer

from attndeploy.cli import app as cli_app
from attndeploy.cli.deprecated import POSITIONAL_TO_OPTION, RENAMED_OPTIONS, rewrite_deprecated
from attndeploy.cli.options import MEANINGS

CLI_DIR = Path(cli_app.__file__).parent


def _commands() -> dict[str, Any]:
    return dict(typer.main.get_command(cli_app.app).commands)  # type: ignore[attr-defined]


def _options() -> list[tuple[str, str, str, bool]]:
    """(command, option name, help, is a flag) for every option name of every command (the
    --no- side of a boolean flag included)."""
    found = []
    for command, click_command in _commands().items():
        for param in click_command.params:
            if param.param_type_name != "option":
                continue
            flag = bool(getattr(param, "is_flag", False))
            for name in [*param.opts, *param.secondary_opts]:
                found.append((command, name, param.help or "", flag))
    return found


def test_an_option_name_used_by_two_commands_has_one_registered_meaning() -> None:
    users: dict[str, set[str]] = defaultdict(set)
    for command, name, _, _ in _options():
        users[name].add(command)
    unregistered = {name: sorted(commands) for name, commands in users.items()
                    if len(commands) > 1 and name not in MEANINGS}
    assert unregistered == {}, "register each shared name's one meaning in options.MEANINGS"


def test_every_use_of_a_registered_name_starts_with_its_meaning() -> None:
    """A help that says something else is the name used with a second meaning."""
    wrong = [(command, name, help_text) for command, name, help_text, _ in _options()
             if name in MEANINGS and not help_text.startswith(MEANINGS[name])]
    assert wrong == []


def test_a_name_is_a_flag_everywhere_or_nowhere() -> None:
    """`--text` as texts in one command and a yes/no switch in another is two meanings."""
    kinds: dict[str, set[bool]] = defaultdict(set)
    for _, name, _, flag in _options():
        kinds[name].add(flag)
    assert {name: kind for name, kind in kinds.items() if len(kind) > 1} == {}


def test_every_registered_meaning_is_used() -> None:
    used = {name for _, name, _, _ in _options()}
    assert sorted(set(MEANINGS) - used) == []


# Names the ecosystem gives a meaning the command line must not contradict
RESERVED = {
    # the kind of model in Optimum and transformers pipelines (text-classification,
    # token-classification, ...); train's built-in data set is `--dataset` (old `--task` kept
    # for one release, `deprecated.RENAMED_OPTIONS`)
    "--task",
}


def test_no_command_takes_a_name_the_ecosystem_means_otherwise() -> None:
    assert sorted({name for _, name, _, _ in _options()} & RESERVED) == []


def test_train_s_old_task_option_names_the_built_in_data_set() -> None:
    rewritten, warnings = rewrite_deprecated(["train", "--task", "tagging", "--out", "o"],
                                             cli_app.value_options)
    assert rewritten == ["train", "--dataset", "tagging", "--out", "o"]
    assert warnings == ["--task is deprecated; use --dataset"]


# ------------------------------------------------------------------ defaults typed in the CLI

TYPE_CONVERSIONS = {"Path", "str", "int", "float"}


def _typed(node: ast.expr) -> str | None:
    """Why the default expression `node` is a value typed in the CLI, or None when it is read
    from the library (a name, a library call such as `field_default(Cls, "field")`, None, a
    flag's False)."""
    if isinstance(node, ast.Constant):
        if node.value is None or node.value is False:
            return None
        return f"the literal {node.value!r}"
    if isinstance(node, ast.Attribute):  # `Family.transformer`: a choice typed here
        return f"the member {ast.unparse(node)}"
    if isinstance(node, ast.UnaryOp | ast.BinOp):
        return f"the expression {ast.unparse(node)}"
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in TYPE_CONVERSIONS
            and any(isinstance(arg, ast.Constant) for arg in node.args)):
        return f"the value {ast.unparse(node)}"
    return None


def _command_functions() -> list[tuple[str, ast.FunctionDef]]:
    found = []
    for module, function in cli_app.COMMANDS.values():
        tree = ast.parse((CLI_DIR / f"{module}.py").read_text(encoding="utf-8"))
        found += [(f"{module}.py:{function}", node) for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef) and node.name == function]
    return found


def _group_functions() -> list[tuple[str, ast.FunctionDef]]:
    """The `options` functions of the option groups (cli/args/), which declare a command's
    options for it (`args.base.takes_options`)."""
    found = []
    for path in sorted((CLI_DIR / "args").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [(f"args/{path.name}:options", node) for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef) and node.name == "options"]
    return found


def test_no_command_types_a_default_of_its_own() -> None:
    """Every default comes from the library (`cli/defaults.py`): a number, a string or a
    choice typed in a command's signature is a second source of truth."""
    typed = []
    for where, function in [*_command_functions(), *_group_functions()]:
        arguments = function.args
        defaults = [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]
        names = [a.arg for a in arguments.args[len(arguments.args) - len(arguments.defaults):]]
        names += [a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults,
                                        strict=True) if d is not None]
        for name, default in zip(names, defaults, strict=True):
            why = _typed(default)
            if why is not None:
                typed.append(f"{where} {name} = {why}")
    assert len(_command_functions()) == len(cli_app.COMMANDS)
    assert len(_group_functions()) > 1
    assert typed == []


# Enums the CLI may spell itself: words of its own grammar, not the library's choices
CLI_GRAMMAR = {"debug.py": {"Action"}}  # `attndeploy debug compare`: the action word


def test_no_command_types_the_choices_of_an_option() -> None:
    """An option's choices are the library's tuples (`options.choices`), never an Enum whose
    members are typed again in cli/."""
    typed = []
    for path in sorted(CLI_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.ClassDef)
                    and any("Enum" in ast.unparse(base) for base in node.bases)
                    and node.name not in CLI_GRAMMAR.get(path.name, set())):
                typed.append(f"{path.name}:{node.name}")
    assert typed == []


@pytest.mark.parametrize("source, why", [
    ("def command(seed: int = 0): ...", "the literal 0"),
    ("def command(family: F = Family.transformer): ...", "the member Family.transformer"),
    ("def command(out: Path = Path('deploy')): ...", "the value Path('deploy')"),
    ("def command(seed: int = field_default(C, 'seed')): ...", None),
    ("def command(force: bool = False): ...", None),
])
def test_the_typed_default_check_tells_a_typed_value_from_a_library_one(source: str,
                                                                         why: str | None) -> None:
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert _typed(function.args.defaults[0]) == why


# ------------------------------------------------------------------------------ old spellings

def test_every_old_spelling_is_gone_from_its_command_and_its_new_name_is_there() -> None:
    commands = _commands()
    for command, renames in RENAMED_OPTIONS.items():
        names = {name for param in commands[command].params
                 for name in [*param.opts, *param.secondary_opts]}
        for old, new in renames.items():
            assert new in names, (command, new)
            assert old not in names or old in renames.values(), (command, old)


@pytest.mark.parametrize("command, old, new", [
    (command, old, new) for command, renames in sorted(RENAMED_OPTIONS.items())
    for old, new in sorted(renames.items())])
def test_an_old_spelling_becomes_the_new_one_with_one_warning(command: str, old: str,
                                                              new: str) -> None:
    valued = cli_app.value_options(command)
    args = [command, old, "VALUE"] if new in valued else [command, old]
    rewritten, warnings = rewrite_deprecated(args, cli_app.value_options)
    assert rewritten == [command, new, *args[2:]]
    assert warnings == [f"{old} is deprecated; use {new}"]
    equals, _ = rewrite_deprecated([command, f"{old}=v"], cli_app.value_options)
    assert equals == [command, f"{new}=v"]


def test_a_value_that_looks_like_an_old_option_is_left_alone() -> None:
    """`predict m.onnx --text --file` classifies the text "--file"."""
    args = ["predict", "m.onnx", "--text", "--file"]
    assert rewrite_deprecated(args, cli_app.value_options) == (args, [])
    after = ["loadtest", "--model", "m", "--", "--warmup"]
    assert rewrite_deprecated(after, cli_app.value_options) == (after, [])


def test_the_old_positional_repository_becomes_the_option() -> None:
    for command, option in POSITIONAL_TO_OPTION.items():
        rewritten, warnings = rewrite_deprecated([command, "repo", "--json"],
                                                 cli_app.value_options)
        assert rewritten == [command, option, "repo", "--json"]
        assert len(warnings) == 1 and option in warnings[0]
        given = [command, option, "repo"]
        assert rewrite_deprecated(given, cli_app.value_options) == (given, [])


def test_an_old_spelling_still_works_through_main(monkeypatch, capsys, tmp_path) -> None:
    """Through the entry point: the warning, then the command as if spelled anew (here
    check-repo's answer for a folder that is not a repository)."""
    from tests.cli.test_app import run_main

    code, _, err = run_main(monkeypatch, capsys, "check-repo", str(tmp_path / "absent"))
    assert err[0].startswith("warning: the repository as an argument of check-repo is "
                             "deprecated; use --repo ")
    code_new, _, err_new = run_main(monkeypatch, capsys, "check-repo", "--repo",
                                    str(tmp_path / "absent"))
    assert (code, err[1:]) == (code_new, err_new)


# ------------------------------------------------------------------ files of texts from pipes

def test_every_file_of_texts_takes_a_pipe() -> None:
    """`--data` and `--text-file` go through `readable_text_file` (a pipe or stdin read once),
    except predict's, which streams its input itself."""
    from attndeploy.cli.options import readable_text_file

    for command, click_command in _commands().items():
        for param in click_command.params:
            if param.param_type_name == "option" and {"--data", "--text-file"} & set(param.opts):
                if command == "predict":
                    continue
                assert param.callback is not None, (command, param.opts)
                assert param.callback.__wrapped__ is readable_text_file or (
                    param.callback is readable_text_file), (command, param.opts)


def test_a_pipe_or_stdin_is_read_once_into_a_file_and_a_file_is_left_as_it_is(
        tmp_path, monkeypatch) -> None:
    import io
    import os
    import threading

    from attndeploy.cli.options import readable_text_file

    read_end, write_end = os.pipe()
    threading.Thread(target=lambda: os.write(write_end, b"one\ntwo\n") and os.close(write_end)
                     ).start()
    try:
        spooled = readable_text_file(Path(f"/dev/fd/{read_end}"))
    finally:
        os.close(read_end)
    assert spooled is not None and spooled.is_file() and spooled.name == str(read_end)
    assert spooled.read_bytes() == b"one\ntwo\n"
    assert spooled.read_bytes() == b"one\ntwo\n"  # a file: read as often as a command needs
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"three\n")))
    from_stdin = readable_text_file(Path("-"))
    assert from_stdin is not None and from_stdin.read_bytes() == b"three\n"
    regular = tmp_path / "texts.txt"
    regular.write_text("four\n")
    assert readable_text_file(regular) == regular
    assert readable_text_file(tmp_path / "absent") == tmp_path / "absent"  # the command's error


def test_a_ranged_option_has_its_one_range_in_every_command() -> None:
    """`predict --threads 0` and `quantize --threads 0` are the same usage error (exit 2)."""
    from attndeploy.cli.options import RANGES

    seen: dict[str, set[tuple]] = defaultdict(set)
    for click_command in _commands().values():
        for param in click_command.params:
            name = next((n for n in param.opts if n in RANGES), None)
            if name is not None:
                seen[name].add((getattr(param, "min", None), getattr(param, "max", None)))
    assert seen and {name: bounds for name, bounds in seen.items()} == {
        name: {(r["min"], r["max"])} for name, r in RANGES.items() if name in seen}
