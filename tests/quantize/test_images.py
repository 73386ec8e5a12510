"""`quantize` on image exports: int8 judged on random images of the export's size and, with
`--data`, on an image folder's labelled images (its test/ part when it has one); the file is
written only within the tolerances, and the int8 model labels image files as fp32 does."""

from __future__ import annotations

from pathlib import Path

import pytest

from attndeploy.errors import DataError, QuantizeError
from attndeploy.families.image_classification.predict import ImageClassifier
from attndeploy.quantize import QuantizeOptions, quantize_model
from attndeploy.quantize.decoder import record_of
from tests.cli.test_train_cli import assert_one_line_error, run_cli
from tests.families.image_classification.images import image_export, write_folder

pytestmark = pytest.mark.usefixtures("torch_defaults")
TEST_PER_CLASS = 2  # images per class in data/test/


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("image_quantize")
    write_folder(root / "data" / "train", per_class=4)
    write_folder(root / "data" / "test", per_class=TEST_PER_CLASS, seed=1)
    return root


@pytest.fixture(scope="module")
def ganet(root) -> Path:
    return image_export(root / "data", root, "vit", "ganet")[1]


def test_int8_is_judged_on_the_held_out_images_and_labels_them_as_fp32(ganet, root):
    out = root / "int8.onnx"
    result = quantize_model(ganet, out, QuantizeOptions(), data=root / "data")
    assert result.passed and out.is_file()
    (candidate,) = result.candidates
    assert candidate.data.texts == 3 * TEST_PER_CLASS and candidate.data.unit == "images"
    assert candidate.data.fp32_accuracy is not None and candidate.data.int8_accuracy is not None
    assert candidate.grid.shapes == [(1, 1, 8, 8), (4, 1, 8, 8), (16, 1, 8, 8)]
    assert candidate.grid.gate_flips is not None and candidate.gate_network  # fp32 gates
    assert candidate.quantized_nodes > 0 and record_of(out)["method"] == "dynamic"
    files = sorted(str(p) for p in (root / "data" / "test").rglob("*.png"))
    before, after = ImageClassifier(ganet).predict(files), ImageClassifier(out).predict(files)
    assert [r["label"] for r in before] == [r["label"] for r in after]


def test_static_calibrates_on_the_images(ganet, root):
    result = quantize_model(ganet, root / "static.onnx",
                            QuantizeOptions(method="static", max_logit_change=100.0,
                                            min_agreement=0.0, max_accuracy_drop=1.0),
                            data=root / "data")
    assert result.passed and record_of(root / "static.onnx")["method"] == "static"


def test_outside_a_tolerance_nothing_is_written(ganet, root):
    out = root / "strict.onnx"
    result = quantize_model(ganet, out, QuantizeOptions(max_logit_change=1e-9))
    assert not result.passed and not out.exists()
    with pytest.raises(QuantizeError, match="largest logit change"):
        result.raise_for_failure()


def test_a_class_the_model_lacks_is_refused(ganet, root):
    write_folder(root / "other", per_class=1, classes=("left", "cat"))
    with pytest.raises(DataError, match="'cat'"):
        quantize_model(ganet, root / "never.onnx", data=root / "other")
    assert not (root / "never.onnx").exists()


def test_the_cli_reports_images_and_refuses_a_text_shape(ganet, root):
    result = run_cli("quantize", str(ganet), "--out", str(root / "cli.onnx"), "--data",
                     str(root / "data"), "--shapes", "2", cwd=root)
    assert result.returncode == 0, result.stderr
    assert f"{3 * TEST_PER_CLASS} images: labels equal" in " ".join(result.stdout.split())
    refused = run_cli("quantize", str(ganet), "--out", str(root / "no.onnx"), "--shapes",
                      "1x8", cwd=root)
    assert_one_line_error(refused, "validation", "'1x8'", "batch sizes")
    assert not (root / "no.onnx").exists()
