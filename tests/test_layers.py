"""The package's layers (docs/architecture.md, "Layers"): a module imports only its own layer
and the layers below it, and the torch-free layers import no torch layer and no torch.

Every `import` counts: module-level ones, those inside functions (they run on first use, so they
are as real a dependency as any other) and those under `if TYPE_CHECKING:` (they run under a type
checker, which then sees the cycle, and they tie the lower layer's API to the upper one; the
fix is cheap: annotate with the lower layer's own types or `Any`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attndeploy"


@dataclass(frozen=True)
class Layer:
    name: str
    prefixes: tuple[str, ...]
    torch_free: bool = False


# Lowest first. A module belongs to the layer of its most specific (longest) matching prefix.
LAYERS: tuple[Layer, ...] = (
    Layer("base", ("attndeploy", "attndeploy.errors", "attndeploy.fsutil",
                   "attndeploy.configbase", "attndeploy.check_defaults",
                   "attndeploy.optimize_methods"), torch_free=True),
    Layer("runtime", ("attndeploy.runtime", "attndeploy.interface", "attndeploy.integrations",
                      "attndeploy.integrations.hf_tokenizer"), torch_free=True),
    Layer("reference", ("attndeploy.variants.functional",)),
    Layer("opspec", ("attndeploy.opspec",)),
    Layer("variants", ("attndeploy.variants", "attndeploy.nn")),
    Layer("config", ("attndeploy.config",)),
    Layer("models", ("attndeploy.models", "attndeploy.data",
                     "attndeploy.integrations.transformers", "attndeploy.integrations.hf_hooks",
                     "attndeploy.integrations.warm_start")),
    Layer("checkpoint", ("attndeploy.checkpoint", "attndeploy.integrations.hf_checkpoint")),
    Layer("train", ("attndeploy.train", "attndeploy.training",
                    "attndeploy.integrations.hf_train", "attndeploy.integrations.hf_data")),
    Layer("export", ("attndeploy.export", "attndeploy.integrations.hf_export")),
    Layer("validate", ("attndeploy.validate",)),
    Layer("optimize", ("attndeploy.optimize",)),
    Layer("debug", ("attndeploy.debug",)),
    Layer("quantize", ("attndeploy.quantize",)),
    Layer("serving", ("attndeploy.serving",), torch_free=True),
    Layer("deploy", ("attndeploy.deploy",), torch_free=True),
    Layer("quickstart", ("attndeploy.quickstart",)),
    Layer("cli", ("attndeploy.cli", "attndeploy.__main__")),
)
INDEX = {layer.name: position for position, layer in enumerate(LAYERS)}

# Third-party packages a torch-free layer must not import (torch itself, or what imports it).
TORCH_PACKAGES = ("torch", "onnxscript", "safetensors.torch", "transformers")

# Edges allowed against the table, each with its reason. Keep this short.
ALLOWED = {
    ("attndeploy", "attndeploy.checkpoint"):
        "the package root re-exports load_checkpoint/read_checkpoint lazily, on first use",
}

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


def layer_of(module: str) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), layer)
    return best[1] if best else None


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, path: Path | None = None) -> set[str]:
    """Every module `module` (read from `path`, default its file) imports: absolute names;
    `from x import y` names x.y when y is a module of the package, else x."""
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


def layer_violations() -> list[str]:
    problems = []
    for module in MODULES:
        own = layer_of(module)
        assert own is not None, f"{module} belongs to no layer: add its prefix to LAYERS"
        for target in sorted(imports_of(module)):
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
    ("attndeploy.variants.functional", "reference"),
    ("attndeploy.variants.ganet.layer", "variants"),
    ("attndeploy.integrations.hf_checkpoint", "checkpoint"),
    ("attndeploy.integrations.hf_export", "export"),
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
