"""An image model under the real tritonserver, through the CLI: `package` a tiny trained image
model, `infer --image-file` one good image (its label is in-process `predict`'s), one bad image
(one error line, exit 1: the server's per-request error), then a good one again (the server
still answers); `loadtest --image-folder` on the training images, every answer checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attndeploy.families.image_classification.predict import ImageClassifier
from attndeploy.serving.server import TritonServer, free_ports
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli
from tests.serving.image_fixtures import BAD_IMAGES, good_image, tiny_export

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_infer_sends_image_files_and_a_bad_one_fails_alone(tmp_path: Path) -> None:
    export = tiny_export(tmp_path / "export", trained=True)
    parse_json(run_cli("package", str(export), "--repo", str(tmp_path / "repo"), "--model",
                       "tiny", "--json", cwd=tmp_path))
    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    good.write_bytes(good_image(1, seed=7))
    bad.write_bytes(BAD_IMAGES["16-bit grey"][0])
    (expected,) = ImageClassifier(export, threads=1).predict([good])
    grpc, http, metrics = free_ports()
    with TritonServer(tmp_path / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=tmp_path / "server.log") as server:
        def infer(image: Path) -> object:
            return run_cli("infer", "--model", "tiny_image", "--image-file", str(image),
                           "--url", server.grpc_url, "--json", cwd=tmp_path)

        first = parse_json(infer(good))
        (record,) = first["predictions"]
        assert (record["label"], record["label_id"]) == (expected["label"], expected["label_id"])
        for label, logit in expected["logits"].items():  # the same numbers, not only the label
            assert record["logits"][label] == pytest.approx(logit, abs=1e-5)
        assert_one_line_error(infer(bad), "server", "bad.png", "INVALID_ARG",
                              "image 0: a 16-bit PNG")
        again = parse_json(infer(good))
        assert again["predictions"] == first["predictions"]
        http_answer = parse_json(run_cli(
            "infer", "--model", "tiny_image", "--image-file", str(good), "--protocol", "http",
            "--url", server.http_url, "--json", cwd=tmp_path))
        assert [p["label"] for p in http_answer["predictions"]] == [expected["label"]]
        # the load test sends the training folder's images; every answer checked in process
        report = parse_json(run_cli(
            "loadtest", "--model", "tiny_image", "--repo", str(tmp_path / "repo"), "--url",
            server.grpc_url, "--image-folder", str(tmp_path / "export" / "data"),
            "--concurrency", "2", "--batch-size", "2", "--window", "0.5", "--max-windows", "3",
            "--check-fraction", "1", "--json", cwd=tmp_path))
        (level,) = report["levels"]
        assert level["error_count"] == 0 and level["checks"]["failed"] == 0
        assert level["checks"]["done"] > 0
    assert json.dumps(first)  # JSON all through
