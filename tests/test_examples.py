"""The examples of docs/own-model.md ("Bring your own model") are examples/own_model.py and
examples/my_models.py, verbatim, and they run: the first as a script, the second through the
page's commands (export --factory, validate --factory, package, check-repo)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own_model.py"
FACTORY = ROOT / "examples" / "my_models.py"


def page_examples() -> list[str]:
    """The python blocks of docs/own-model.md before its functional API, in order."""
    page = (ROOT / "docs" / "own-model.md").read_text()
    section = page.split("# Bring your own model", 1)[1].split("\n## Functional API", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_docs_own_model_shows_the_example_files_verbatim():
    assert page_examples() == [EXAMPLE.read_text(), FACTORY.read_text()]


def test_the_own_model_example_trains_exports_and_validates(tmp_path):
    out = tmp_path / "my_model.onnx"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(out)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "parity passed" in done.stdout
    report = json.loads(Path(f"{out}.parity.json").read_text())
    assert report["passed"] and report["gates"]["flips"] == 0
    assert out.is_file()


def test_the_page_s_commands_take_the_factory_example_through_export_to_a_checked_repository(
    tmp_path,
):
    import shutil

    import torch
    from safetensors.torch import save_file

    shutil.copy(FACTORY, tmp_path / "my_models.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    sys.path.insert(0, str(tmp_path))
    try:
        import my_models

        torch.manual_seed(3)
        save_file(my_models.build()[0].state_dict(), str(tmp_path / "w.safetensors"))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_models", None)

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "attndeploy", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done.stdout

    run("export", "--factory", "my_models:build", "--weights", "w.safetensors", "--out", "reg.onnx")
    run("validate", "--factory", "my_models:build", "--weights", "w.safetensors", "reg.onnx",
        "--json-out", "parity.json")
    assert json.loads((tmp_path / "parity.json").read_text())["passed"]
    run("package", "reg.onnx", "--repo", "repo")
    report = json.loads(run("check-repo", "--repo", "repo", "--json"))
    assert report["models"] == ["reg"] and report["passed"], report
