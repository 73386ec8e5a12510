"""The extension API is public: outside `attndeploy/variants/`, nothing imports a private
`attndeploy.variants._*` module (the variant machinery is `attndeploy.variants.api`), nor does a
plug-in variant or the guide to writing one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import attndeploy.variants.api as api
from attndeploy.variants import _causal, _common, _gating, _recurrent

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"^attndeploy\.variants\._")


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if PRIVATE.match(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if PRIVATE.match(node.module):
                found.append(node.module)
            elif node.module == "attndeploy.variants":
                found += [f"{node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_")]
    return found


def test_no_module_outside_the_variants_imports_a_private_variants_module():
    outside = [path for path in (ROOT / "attndeploy").rglob("*.py")
               if (ROOT / "attndeploy" / "variants") not in path.parents]
    plugins = list((ROOT / "tests" / "variants" / "fifth_variant").rglob("*.py"))
    assert outside and plugins
    problems = [f"{path.relative_to(ROOT)}: {name}" for path in outside + plugins
                for name in _private_imports(path)]
    assert not problems, "import these from attndeploy.variants.api:\n" + "\n".join(problems)


def test_the_guide_to_a_new_variant_names_the_public_api_only():
    guide = (ROOT / "docs" / "adding-a-variant.md").read_text(encoding="utf-8")
    assert "attndeploy.variants.api" in guide
    assert not re.search(r"variants[./]_(common|gating|recurrent)", guide)


def test_the_api_re_exports_the_machinery_itself():
    for name in api.__all__:
        home = next(m for m in (_common, _gating, _recurrent, _causal) if hasattr(m, name))
        assert getattr(api, name) is getattr(home, name)


def test_the_scan_sees_every_form_of_a_private_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import attndeploy.variants._common\n"
                     "from attndeploy.variants._gating import GateState\n"
                     "from attndeploy.variants import _recurrent, api\n"
                     "from attndeploy.variants.api import call_op\n")
    assert _private_imports(probe) == ["attndeploy.variants._common",
                                       "attndeploy.variants._gating",
                                       "attndeploy.variants._recurrent"]
