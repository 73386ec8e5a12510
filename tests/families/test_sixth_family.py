"""Adding a model family touches only its folder: a copy of the package plus
`sixth_family/text_regression/` (a text in, one number out: its own head, loss, data, metric,
baseline, decode, served fields and parity) goes through the CLI the way a user would:
`train --data FILE` -> `export` -> `validate` -> `predict` -> `package` -> `serve` -> `infer` ->
`loadtest` -> `stop`, with nothing else in the tree changed (as
`tests/variants/fifth_variant/` does for attention variants)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAMILY = Path(__file__).parent / "sixth_family" / "text_regression"
UP, DOWN = ("up", "rise", "gain"), ("down", "fall", "loss")
FILLER = tuple(f"w{i}" for i in range(30))


def _tree_with_family(tmp_path: Path) -> dict[str, str]:
    """A copy of the package with the family's folder added; the environment that imports it."""
    package = tmp_path / "src" / "attndeploy"
    shutil.copytree(ROOT / "attndeploy", package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(FAMILY, package / "families" / "text_regression",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "OMP_NUM_THREADS": "1"}


def regression_rows(count: int, seed: int) -> list[dict]:
    """Texts whose value is (up words - down words) / 2 plus a little noise: a signal attention
    can find, which a mean predictor cannot."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        words = [rng.choice(FILLER) for _ in range(rng.randint(4, 12))]
        ups, downs = rng.randint(0, 3), rng.randint(0, 3)
        for word in [rng.choice(UP) for _ in range(ups)] + [rng.choice(DOWN) for _ in range(downs)]:
            words.insert(rng.randint(0, len(words)), word)
        rows.append({"text": " ".join(words),
                     "value": round((ups - downs) / 2 + rng.gauss(0, 0.05), 4)})
    return rows


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("variant", ["ganet"])
def test_a_sixth_family_goes_from_training_to_the_load_test(tmp_path: Path, variant: str) -> None:
    from attndeploy.serving.server.ports import free_ports

    env = _tree_with_family(tmp_path)

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "attndeploy", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, f"{args[0]}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        return done.stdout

    data = tmp_path / "values.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in regression_rows(600, seed=0)))
    texts = [row["text"] for row in regression_rows(6, seed=99)]

    trained = json.loads(cli("train", "--data", str(data), "--variant", variant,
                             "--steps", "250", "--out", "ckpt", "--json"))
    metrics = trained["metrics"]
    # Its own metric beside its own baseline: the mean predictor's error is the spread of values.
    assert metrics["rmse"] < metrics["baseline_rmse"], metrics

    exported = cli("export", "ckpt", "--out", "model.onnx")
    assert "model.onnx" in exported
    report = json.loads(cli("validate", "ckpt", "model.onnx", "--shapes", "1x4,2x9,3x16",
                            "--json"))
    assert report["passed"], report["failures"]

    predicted = json.loads(cli("predict", "model.onnx", *[a for t in texts for a in ("--text", t)],
                               "--json"))["predictions"]
    assert [p["tokens"] for p in predicted] == [t.split() for t in texts]
    assert all(isinstance(p["value"], float) for p in predicted)
    assert "label" not in predicted[0] and "tags" not in predicted[0]
    table = cli("predict", "model.onnx", "--text", texts[0])
    assert f"{predicted[0]['value']:.3f}"[:4] in table

    cli("package", "model.onnx", "--repo", "repo", "--model", "reg", "--flavor", "python")
    grpc, http, metrics_port = free_ports(3)
    cli("serve", "--repo", "repo", "--background", "--grpc-port", str(grpc), "--http-port",
        str(http), "--metrics-port", str(metrics_port))
    try:
        url = f"127.0.0.1:{grpc}"
        for text, local in zip(texts, predicted, strict=True):
            served = json.loads(cli("infer", "--model", "reg_text", "--text", text,
                                    "--url", url, "--json"))
            assert served["tokens"] == local["tokens"]
            assert served["value"] == pytest.approx(local["value"], abs=1e-4)
            assert served["attended"] == local["attended"]
        loaded = json.loads(cli("loadtest", "--model", "reg_text", "--url", url,
                                "--concurrency", "2", "--seq", "8", "--window", "0.5",
                                "--max-windows", "3", "--check-fraction", "0.3",
                                "--onnx", "model.onnx", "--json"))
        assert loaded["passed"], loaded["failures"]
        checks = loaded["levels"][0]["checks"]
        assert checks["done"] > 0 and checks["failed"] == 0, checks
    finally:
        cli("stop", "--repo", "repo")
