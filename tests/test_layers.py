"""The package's layers (docs/architecture.md, "Layers"): a module imports only its own layer
and the layers below it, and the torch-free layers import no torch layer and no torch; and no
two files import each other, directly or around a loop.

Every `import` counts: module-level ones, those inside functions (they run on first use, so they
are as real a dependency as any other) and those under `if TYPE_CHECKING:` (they run under a type
checker, which then sees the cycle, and they tie the lower layer's API to the upper one). The fix
is cheap: the lower module annotates with its own types or a Protocol of what it reads, or the
types both need live in a third module below both. Importing a module also runs the
`__init__.py` of every package around it, so the layer check counts those packages too
(`attndeploy.variants.functional` sits below `opspec`, but `attndeploy.variants` above it).
No edge is allowed against the table, and the package root, which every import runs, imports
nothing of the package (`__version__` is all the others take from it).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attndeploy"
ROOT_PACKAGE = "attndeploy"


@dataclass(frozen=True)
class Layer:
    name: str
    prefixes: tuple[str, ...]
    torch_free: bool = False


# Lowest first. A module belongs to the layer of its most specific (longest) matching prefix.
LAYERS: tuple[Layer, ...] = (
    Layer("base", ("attndeploy", "attndeploy.errors", "attndeploy.fsutil",
                   "attndeploy.configbase", "attndeploy.check_defaults",
                   "attndeploy.optimize_methods", "attndeploy.checkpoint_formats"),
          torch_free=True),
    # the family registry and each family's declaration and runtime part (numpy only, shipped)
    Layer("runtime", ("attndeploy.runtime", "attndeploy.interface", "attndeploy.families",
                      "attndeploy.families.*.runtime", "attndeploy.generation"), torch_free=True),
    Layer("opspec", ("attndeploy.opspec",)),
    # the variants, their op references (`variants/<name>/reference.py`, `variants/_reference.py`,
    # the `variants.functional` facade) among them: opspec, below, names no variant
    Layer("variants", ("attndeploy.variants", "attndeploy.nn")),
    Layer("config", ("attndeploy.config",)),
    # a family's training part sits with the models: the checkpoint reader rebuilds its head and
    # the datasets check their labels with it
    Layer("models", ("attndeploy.models", "attndeploy.data", "attndeploy.families.*.training")),
    Layer("checkpoint", ("attndeploy.checkpoint",)),
    Layer("train", ("attndeploy.train", "attndeploy.training")),
    Layer("export", ("attndeploy.export",)),
    Layer("validate", ("attndeploy.validate", "attndeploy.families.*.checks")),
    Layer("optimize", ("attndeploy.optimize", "attndeploy.optimize_feeds",
                       "attndeploy.optimize_parity", "attndeploy.optimize_speed")),
    Layer("debug", ("attndeploy.debug",)),
    Layer("quantize", ("attndeploy.quantize",)),
    Layer("serving", ("attndeploy.serving",), torch_free=True),
    Layer("deploy", ("attndeploy.deploy",), torch_free=True),
    Layer("quickstart", ("attndeploy.quickstart",)),
    # Hugging Face models: one plug-in layer over all of core, which never names it (its
    # checkpoint reader and exporter are found through `checkpoint_formats`)
    Layer("integrations", ("attndeploy.integrations",)),
    Layer("cli", ("attndeploy.cli", "attndeploy.__main__")),
)
INDEX = {layer.name: position for position, layer in enumerate(LAYERS)}

# Third-party packages a torch-free layer must not import (torch itself, or what imports it).
TORCH_PACKAGES = ("torch", "onnxscript", "safetensors.torch", "transformers")

# Edges allowed against the table, each with its reason: none. (The package root's lazy
# re-export of load_checkpoint and read_checkpoint was the last; they are read from
# attndeploy.checkpoint.)
ALLOWED: dict[tuple[str, str], str] = {}

# The modules `attndeploy infer` and `attndeploy predict`'s library side import; none may pull
# in torch (they run where only onnxruntime is installed).
TORCH_FREE_ENTRY_POINTS = ("attndeploy.runtime", "attndeploy.runtime.metadata",
                           "attndeploy.runtime.sessions",
                           "attndeploy.interface", "attndeploy.serving.client.infer",
                           "attndeploy.cli.infer")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)  # ["attndeploy", ..., "x"]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _matches(module: str, prefix: str) -> bool:
    """`module` is `prefix` or inside it; a `*` in the prefix stands for one name (a family's
    package: `attndeploy.families.*.training`)."""
    want, got = prefix.split("."), module.split(".")
    return len(got) >= len(want) and all(w in ("*", g) for w, g in zip(want, got, strict=False))


def layer_of(module: str) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.prefixes:
            if _matches(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, path: Path | None = None) -> set[str]:
    """Every module `module` (read from `path`, default its file) imports, wherever the import
    stands (module level, a function, `if TYPE_CHECKING:`): absolute names; `from x import y`
    names x.y when y is a module of the package, else x."""
    path = path or MODULES[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, path.name == "__init__.py", node)
            for alias in node.names:
                child = f"{source}.{alias.name}"
                found.add(child if child in MODULES else source)
    return found


# Every module that calls importlib.import_module, with the modules it may import that way
# (checked against the layers and for cycles like any import) or, where no list can hold
# them, the reason. `test_every_importlib_call_is_listed` keeps the table whole.
def _homes(module: str) -> set[str]:
    return set(importlib.import_module(module)._HOMES.values())


def _tokenizer_modules() -> set[str]:
    from attndeploy.runtime.shipping import TOKENIZER_TYPES

    return {entry.module for entry in TOKENIZER_TYPES.values()}


def _variant_modules() -> set[str]:
    from attndeploy.variants.registry import variant_specs

    packages = {f"attndeploy.variants.{folder.name}"  # what registry._discover imports
                for folder in (PACKAGE / "variants").iterdir()
                if (folder / "__init__.py").is_file() and not folder.name.startswith("_")}
    return packages | {spec.layer.partition(":")[0] for spec in variant_specs()}


def _variant_op_modules() -> set[str]:
    from attndeploy.variants.registry import variant_specs

    return {spec.ops for spec in variant_specs() if spec.ops is not None}


def _family_modules() -> set[str]:
    packages = {f"attndeploy.families.{folder.name}"  # what the family registry imports
                for folder in (PACKAGE / "families").iterdir()
                if (folder / "__init__.py").is_file() and not folder.name.startswith("_")}
    return packages


def _family_parts(part: str) -> Any:
    def parts() -> set[str]:
        from attndeploy.families.registry import family_specs

        return {spec.part(part) for spec in family_specs()}
    return parts


IMPORTLIB: dict[str, Any] = {
    "attndeploy.families.registry": _family_modules,
    "attndeploy.runtime.families": _family_parts("runtime"),
    "attndeploy.models.families": _family_parts("training"),
    "attndeploy.validate.families": _family_parts("checks"),
    "attndeploy.runtime": lambda: _homes("attndeploy.runtime"),
    "attndeploy.deploy": lambda: _homes("attndeploy.deploy"),
    "attndeploy.export": lambda: {f"attndeploy.export.{m}" for m in
                                  importlib.import_module("attndeploy.export")._PUBLIC.values()},
    "attndeploy.runtime.shipping": _tokenizer_modules,  # tokenizer_from_record
    "attndeploy.serving.packaging.text_model_checks":
        "third-party packages a tokenizer needs (`TokenizerType.requires`), probed only",
    "attndeploy.variants.registry": _variant_modules,
    "attndeploy.variants.op_registry": _variant_op_modules,
    "attndeploy.cli.app": lambda: {f"attndeploy.cli.{module}" for module, _ in
                                   importlib.import_module("attndeploy.cli.app").COMMANDS.values()},
    "attndeploy.cli.user_model": "the user's own module, named on the command line (--factory)",
}


def importlib_targets(module: str) -> set[str]:
    """The package modules `module` imports through importlib (IMPORTLIB), resolved."""
    listed = IMPORTLIB.get(module)
    if listed is None or isinstance(listed, str):
        return set()
    return {target for target in listed() if target in MODULES}


def all_imports(module: str) -> set[str]:
    return imports_of(module) | importlib_targets(module)


def packages_run(target: str) -> set[str]:
    """The package's packages that importing `target` runs first: each enclosing package's
    `__init__.py` (importing `attndeploy.variants.functional` runs `attndeploy/variants/__init__.py`
    and what it imports, the variant registry)."""
    parts = target.split(".")
    return {name for name in (".".join(parts[:end]) for end in range(1, len(parts)))
            if name in MODULES}


def layer_violations() -> list[str]:
    problems = []
    for module in MODULES:
        own = layer_of(module)
        assert own is not None, f"{module} belongs to no layer: add its prefix to LAYERS"
        targets = all_imports(module)
        for target in sorted(targets | {p for t in targets for p in packages_run(t)}):
            if own.torch_free and any(target == p or target.startswith(p + ".")
                                      for p in TORCH_PACKAGES):
                problems.append(f"{module} -> {target} (torch-free layer {own.name} imports "
                                f"{target.split('.')[0]})")
            if not target.startswith("attndeploy") or (module, target) in ALLOWED:
                continue
            other = layer_of(target)
            if other is None or other is own:
                continue
            if INDEX[other.name] > INDEX[own.name]:
                problems.append(f"{module} -> {target} (layer {own.name} imports layer "
                                f"{other.name}, which sits above it)")
            elif own.torch_free and not other.torch_free:
                problems.append(f"{module} -> {target} (torch-free layer {own.name} imports "
                                f"torch layer {other.name})")
    return problems


def test_every_import_points_down_the_layer_table():
    problems = layer_violations()
    assert not problems, "imports against docs/architecture.md's layers:\n" + "\n".join(problems)


def import_cycles() -> list[list[str]]:
    """The import cycles between the package's files (each as its modules, sorted): strongly
    connected components of the graph of every import statement, at module level, in a
    function or under `if TYPE_CHECKING:` (a type checker follows those, and they tie the
    lower module's API to the upper one). importlib's targets are plug-ins found by name at
    run time (a registry finding its variants, the CLI its commands): the layer check holds
    them, not this one, since a plug-in imports the registry that finds it by design."""
    graph = {module: {t for t in imports_of(module) if t in MODULES and t != module}
             for module in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_import_cycle_between_files():
    cycles = import_cycles()
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle_also_under_type_checking(tmp_path, monkeypatch):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import attndeploy.b\n", encoding="utf-8")
    b.write_text("x = 1\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "MODULES",
                        {ROOT_PACKAGE: MODULES[ROOT_PACKAGE], "attndeploy.a": a, "attndeploy.b": b})
    assert import_cycles() == []
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import attndeploy.a\n",
                 encoding="utf-8")
    assert import_cycles() == [["attndeploy.a", "attndeploy.b"]]
    b.write_text("def f():\n    from attndeploy import a\n", encoding="utf-8")
    assert import_cycles() == [["attndeploy.a", "attndeploy.b"]]


def test_the_package_root_imports_nothing_of_the_package():
    """Every import of a submodule runs the root first: it keeps `__version__` and names where
    what it once re-exported lives."""
    assert {t for t in all_imports(ROOT_PACKAGE) if t.startswith("attndeploy")} == set()
    import attndeploy

    for name in ("load_checkpoint", "read_checkpoint"):
        with pytest.raises(AttributeError, match=f"from attndeploy.checkpoint import {name}"):
            getattr(attndeploy, name)


def test_every_importlib_call_is_listed():
    calling = {module for module, path in MODULES.items()
               if "import_module(" in path.read_text(encoding="utf-8")}
    assert calling == set(IMPORTLIB), "list each importlib call's targets in IMPORTLIB"
    for module, listed in IMPORTLIB.items():
        if not isinstance(listed, str):
            assert importlib_targets(module), f"{module}: its importlib targets resolve to none"


def test_no_core_module_names_the_integrations():
    """Core finds the Hugging Face plug-ins through `checkpoint_formats`, by tag: no module
    below the integrations layer imports it, or names it to importlib."""
    below = [module for module in MODULES
             if INDEX[layer_of(module).name] < INDEX["integrations"]]
    naming = [module for module in below
              if any(t.startswith("attndeploy.integrations") for t in all_imports(module))
              or "attndeploy.integrations" in _code_strings(MODULES[module])]
    assert naming == []


def _code_strings(path: Path) -> str:
    """The string constants of a module's code, docstrings left out (they may cite it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return "\n".join(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and id(node) not in docstrings)


def test_the_allowed_edges_still_exist():
    for module, target in ALLOWED:
        assert target in imports_of(module), f"{module} -> {target} is gone: drop it from ALLOWED"


def test_the_import_scan_sees_function_level_type_checking_and_relative_imports(tmp_path):
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from attndeploy.config import ModelConfig\n"
              "def f():\n    import attndeploy.export.exporter\n"
              "from . import registry\nfrom .. import fsutil\n")
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    assert imports_of("attndeploy.variants.probe", probe) == {
        "typing", "attndeploy.config", "attndeploy.export.exporter",
        "attndeploy.variants.registry", "attndeploy.fsutil",
    }


@pytest.mark.parametrize(("module", "layer"), [
    ("attndeploy", "base"),
    ("attndeploy.variants.functional", "variants"),
    ("attndeploy.variants.ganet.layer", "variants"),
    ("attndeploy.integrations.hf_checkpoint", "integrations"),
    ("attndeploy.integrations.hf_export", "integrations"),
    ("attndeploy.serving.packaging.text_model", "serving"),
    ("attndeploy.interface", "runtime"),
    ("attndeploy.debug.inside", "debug"),
])
def test_the_most_specific_prefix_decides_the_layer(module, layer):
    assert layer_of(module).name == layer


def test_the_runtime_the_interface_and_infer_import_without_torch():
    code = (f"import sys\nimport {', '.join(TORCH_FREE_ENTRY_POINTS)}\n"
            "heavy = sorted(m for m in ('torch', 'onnxscript', 'transformers') "
            "if m in sys.modules)\nassert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
