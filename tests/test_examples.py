"""The README's "Bring your own model" example is examples/own_model.py, and it runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own_model.py"


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Bring your own model", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def test_the_readme_shows_the_example_file_verbatim():
    assert readme_example() == EXAMPLE.read_text()


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
