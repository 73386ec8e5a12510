"""Adding a variant touches only its folder: a copy of the package plus the folder of a fifth
variant (`tests/variants/fifth_variant/tempered`, with a config, a layer and its own op) trains,
saves, exports with its custom node and validates, and the CLI offers it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from attndeploy.checkpoint import save_checkpoint
from attndeploy.cli.options import Variant
from attndeploy.config import ModelConfig, TemperedConfig
from attndeploy.export.exporter import export_checkpoint
from attndeploy.models import build_model
from attndeploy.validate import ValidationOptions, validate_model
from attndeploy.variants import variant_names

out = Path(sys.argv[1])
config = ModelConfig(vocab_size=30, num_labels=2, variant="tempered", d_model=16, n_heads=2,
                     n_layers=2, d_ff=32, max_seq=16, tempered=TemperedConfig(tau=0.5))
assert ModelConfig.from_dict(config.to_dict()) == config
torch.manual_seed(0)
checkpoint = save_checkpoint(build_model(config), out / "ckpt", label_names=("a", "b"))
result = export_checkpoint(checkpoint, out / "model.onnx")
report = validate_model(checkpoint, out / "model.onnx",
                        ValidationOptions(shapes="1x1,2x5,3x9", reference_shapes="2x5"))
print(json.dumps({"variants": list(variant_names()), "cli": [v.value for v in Variant],
                  "nodes": result.custom_nodes, "passed": report.passed}))
"""


@pytest.mark.slow
def test_a_fifth_variant_folder_is_all_it_takes(tmp_path):
    package = tmp_path / "src" / "attndeploy"
    shutil.copytree(ROOT / "attndeploy", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(__file__).parent / "fifth_variant" / "tempered",
                    package / "variants" / "tempered")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["variants"] == ["standard", "qvi", "ganet", "evolving", "tempered"]
    assert facts["cli"] == facts["variants"]
    assert facts["nodes"] == {"TemperedAttention": 2}
    assert facts["passed"]
