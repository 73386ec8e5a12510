"""`debug compare` on image models: the image family makes the inputs (random images by the
preprocessing a checkpoint or an export records, `--shapes` as batch sizes), and the engine
compares every attention node, block and output as it does for text."""

from __future__ import annotations

from pathlib import Path

import pytest

from attndeploy import debug
from attndeploy.errors import ValidationError
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli
from tests.debug.conftest import plant_in_body
from tests.families.image_classification.images import image_export, write_folder

pytestmark = pytest.mark.usefixtures("torch_defaults")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("image_debug")
    write_folder(root / "data", per_class=2)
    return root


@pytest.fixture(scope="module")
def ganet(root) -> tuple[Path, Path]:
    return image_export(root / "data", root, "vit", "ganet")


def test_a_checkpoint_and_its_export_agree_node_by_node(ganet):
    checkpoint, export = ganet
    report = debug.compare_checkpoint(checkpoint, export, shapes="1,3")
    assert report.passed, report.verdict
    assert report.shapes == ["1 image", "3 images"]
    kinds = [layer.op_type for layer in report.layers]
    assert kinds.count("GatedAttention") == 3 and kinds.count("ViTBlock") == 3
    assert {layer.label for layer in report.layers} >= {"output logits", "output gates"}


def test_a_planted_layer_is_found_from_the_export_alone(ganet, root):
    """`--against` without a checkpoint: the images come from the export's metadata."""
    _, export = ganet
    planted = root / "planted.onnx"
    plant_in_body(export, planted, 1)
    result = run_cli("debug", "compare", str(planted), "--against", str(export), "--json",
                     cwd=root)
    assert result.returncode == 1, result.stderr
    assert "first divergence: layer 1 (GatedAttention)" in result.stderr


def test_a_checkpoint_makes_the_inputs_of_two_exports(ganet, root):
    checkpoint, export = ganet
    report = parse_json(run_cli("debug", "compare", str(checkpoint), str(export), "--against",
                                str(export), "--shapes", "2", "--json", cwd=root))
    assert report["passed"] and report["shapes"] == ["2 images"]


def test_another_models_export_is_refused_naming_it(ganet, root):
    checkpoint, _ = ganet
    _, other = image_export(root / "data", root, "vit", "ganet", seed=1)
    with pytest.raises(ValidationError, match=f"{other.name} was exported from other weights"):
        debug.compare_checkpoint(checkpoint, other)


def test_a_text_shape_is_refused_in_one_line(ganet, root):
    checkpoint, export = ganet
    result = run_cli("debug", "compare", str(checkpoint), str(export), "--shapes", "4x17",
                     cwd=root)
    assert_one_line_error(result, "validation", "'4x17'", "batch sizes")
