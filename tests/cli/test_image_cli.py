"""`attndeploy train --data DIR` on an image folder, then `export` and `predict --image-file`, as
real subprocesses: the CLI hands a folder to the image family's `train_folder` and labels image
files without torch (the image family's own tests cover the models and the runtime)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.cli.test_train_cli import parse_json, run_cli

TINY = ["--d-model", "16", "--heads", "2", "--layers", "1", "--steps", "12", "--batch-size", "8"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two classes of 8x8 grey images, bright and dark: separable at a glance."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name, offset in (("bright", 120), ("dark", 0)):
        (root / "images" / name).mkdir(parents=True)
        for index in range(12):
            pixels = (rng.random((8, 8)) * 100 + offset).astype(np.uint8)  # [8, 8]
            Image.fromarray(pixels).save(root / "images" / name / f"{index}.png")
    return root


def test_train_on_a_folder_export_and_predict_images(folder):
    trained = parse_json(run_cli("train", "--data", "images", "--variant", "evolving",
                                 "--architecture", "vit", *TINY, "--out", "ck", "--json",
                                 cwd=folder))
    assert {"accuracy", "baseline_accuracy"} <= set(trained["metrics"])
    assert trained["training"]["steps"] == 12  # the recipe given reaches the image trainer
    assert run_cli("export", "ck", "--out", "ck.onnx", cwd=folder).returncode == 0
    files = ["images/bright/0.png", "images/dark/0.png"]
    done = run_cli("predict", "ck.onnx", *[a for f in files for a in ("--image-file", f)],
                   "--jsonl", cwd=folder)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["image"] for r in records] == files
    assert all(r["label"] in ("bright", "dark") for r in records)
    table = run_cli("predict", "ck.onnx", "--image-file", files[0], cwd=folder)
    assert table.stdout.split()[0] == records[0]["label"]


def test_train_ganet_budget_keeps_that_share_of_every_image(folder):
    """--ganet-budget reaches the image model: 2 of the 4 patches of an 8x8 image (patch 4)."""
    trained = parse_json(run_cli("train", "--data", "images", "--variant", "ganet",
                                 "--architecture", "vit", "--ganet-budget", "0.5", *TINY,
                                 "--out", "budget", "--json", cwd=folder))
    assert trained["metrics"]["density"] == 0.5
    saved = json.loads((folder / "budget" / "config.json").read_text())
    assert saved["model"]["ganet_budget"] == 0.5


@pytest.mark.parametrize(("args", "says"), [
    (["train", "--data", "images", "--architecture", "bilstm", "--out", "x"],
     "unknown image architecture 'bilstm'"),
    (["train", "--data", "images", "--architecture", "vit", "--steps", "0", "--out", "x"],
     "steps"),
    (["train", "--data", "images", "--variant", "standard", "--ganet-budget", "0.3", "--out",
      "x"], "applies to GA-Net image models"),
])
def test_a_bad_image_training_is_one_line(folder, args, says):
    done = run_cli(*args, cwd=folder)
    assert done.returncode != 0
    assert says in done.stderr and "Traceback" not in done.stderr
    assert not (folder / "x").exists()
