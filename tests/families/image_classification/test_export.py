"""Export, validate and predict for image models: `pixel_values` [batch, C, H, W] in, attention
layers as attndeploy nodes, the preprocessing in the metadata; PyTorch and onnxruntime agree
over the batch grid; image files are labelled in process without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch

from attndeploy.data.images import measure_preprocessing
from attndeploy.errors import DataError, ExportError, ModelError
from attndeploy.families.image_classification import checks
from attndeploy.families.image_classification.pixels import META_PREPROCESSING, model_inputs
from attndeploy.families.image_classification.predict import ImageClassifier
from attndeploy.models.vision.build import build_model
from attndeploy.models.vision.checkpoint import load_image_model, save_image_model
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli
from tests.families.image_classification.images import CASE_IDS, CASES, tiny_config, write_folder

pytestmark = pytest.mark.usefixtures("torch_defaults")
ROOT = Path(__file__).resolve().parents[3]
NODES = {"standard": {}, "qvi": {"QVIAttention": 3}, "ganet": {"GatedAttention": 3},
         "evolving": {"EvolvingAttentionStart": 1, "EvolvingAttention": 2}}


def _checkpoint(folder: Path, out: Path, architecture: str, variant: str, seed: int = 0) -> Path:
    """A checkpoint of an untrained tiny model, with the preprocessing of `folder`'s images."""
    from attndeploy.data.images import load_image_folder

    images = load_image_folder(folder)
    torch.manual_seed(seed)
    model = build_model(tiny_config(architecture, variant)).eval()
    return save_image_model(model, images.class_names, measure_preprocessing(images.pixels), out)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("images") / "data", per_class=3)


@pytest.fixture(scope="module")
def exported(folder, tmp_path_factory) -> tuple[Path, Path, dict]:
    """A tiny AA-CNN with Evolving Attention, exported by `attndeploy export` (the family's
    hook)."""
    root = tmp_path_factory.mktemp("export")
    checkpoint = _checkpoint(folder, root / "ckpt", "aacnn", "evolving")
    summary = parse_json(run_cli("export", str(checkpoint), "--out", str(root / "model.onnx"),
                                 "--json", cwd=root))
    return checkpoint, root / "model.onnx", summary


def test_the_export_takes_images_and_holds_one_node_per_attention_layer(exported):
    checkpoint, path, summary = exported
    assert summary["inputs"] == ["pixel_values"] and summary["outputs"] == ["logits"]
    assert summary["custom_nodes"] == NODES["evolving"]
    graph = onnx.load(str(path)).graph
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 1, 8, 8]
    metadata = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    loaded = load_image_model(checkpoint)
    assert json.loads(metadata[META_PREPROCESSING]) == loaded.preprocessing.to_dict()
    assert json.loads(metadata["attndeploy.labels"]) == ["left", "right", "top"]
    assert metadata["attndeploy.head"] == "image_classification"


def test_validate_passes_over_the_batch_grid(exported):
    checkpoint, path, _ = exported
    report = checks.validate_checkpoint(checkpoint, path)
    assert report.passed, report.failure()
    assert [c.name for c in report.checks] == ["metadata", "batch 1", "batch 2", "batch 7",
                                               "batch 16"]
    assert all(c.max_error <= 1e-4 for c in report.checks[1:])


def test_validate_fails_against_another_checkpoint(exported, folder, tmp_path):
    _, path, _ = exported
    other = _checkpoint(folder, tmp_path / "other", "aacnn", "evolving", seed=1)
    report = checks.validate_checkpoint(other, path)
    assert not report.passed
    assert report.checks[0].detail == "differs from the checkpoint's: weights"
    assert not any(c.passed for c in report.checks[1:])
    assert report.failure().startswith("image model validation failed (5 check(s); first: "
                                       "metadata")


def test_the_cli_validates_and_describes_an_image_model(exported, folder, tmp_path):
    checkpoint, path, _ = exported
    passed = run_cli("validate", str(checkpoint), str(path), cwd=tmp_path)
    assert passed.returncode == 0 and "validation passed" in passed.stdout, passed.stderr
    other = _checkpoint(folder, tmp_path / "other", "aacnn", "evolving", seed=1)
    failed = run_cli("validate", str(other), str(path), cwd=tmp_path)
    assert_one_line_error(failed, "validation", "image model validation failed")
    info = parse_json(run_cli("info", str(checkpoint), "--json", cwd=tmp_path))
    assert info["family"] == "image-classification"
    assert info["preprocessing"]["height"] == 8 and info["labels"] == ["left", "right", "top"]


def test_options_an_image_export_does_not_take_are_refused(exported, tmp_path):
    checkpoint, _, _ = exported
    with pytest.raises(ExportError, match="--fp16 does not apply to an image model"):
        checks.export_checkpoint(checkpoint, tmp_path / "m.onnx", fp16=True)
    assert not (tmp_path / "m.onnx").exists()


def test_predict_labels_image_files_as_pytorch_does(exported, folder):
    checkpoint, path, _ = exported
    files = sorted(folder.glob("*/*.png"))
    records = ImageClassifier(path).predict(files, batch_size=4)
    loaded = load_image_model(checkpoint)
    with torch.no_grad():
        logits = loaded.model(torch.from_numpy(model_inputs(files, loaded.preprocessing)))
    assert [r["label"] for r in records] == [loaded.labels[i] for i in logits["logits"].argmax(-1)]
    assert [r["label_id"] for r in records] == logits["logits"].argmax(-1).tolist()
    assert records[0]["image"] == str(files[0])
    assert sum(records[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


def test_predict_names_a_bad_image_and_refuses_a_text_model(exported, tmp_path):
    _, path, _ = exported
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(DataError, match="bad.png: not a PNG or JPEG image"):
        ImageClassifier(path).predict([bad])
    with pytest.raises(ModelError, match="no such ONNX file"):
        ImageClassifier(tmp_path / "none.onnx")


def test_predict_imports_no_torch(exported, folder):
    _, path, _ = exported
    code = ("import sys; from attndeploy.families.image_classification.predict import "
            f"ImageClassifier; r = ImageClassifier({str(path)!r}).predict("
            f"[{str(sorted(folder.glob('*/*.png'))[0])!r}]); "
            "assert 'torch' not in sys.modules, 'torch imported'; print(r[0]['label'])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("left", "right", "top")


@pytest.mark.slow
@pytest.mark.parametrize("architecture, variant", CASES, ids=CASE_IDS)
def test_every_variant_in_both_architectures_exports_and_validates(folder, tmp_path,
                                                                  architecture, variant):
    checkpoint = _checkpoint(folder, tmp_path / "ckpt", architecture, variant)
    summary = checks.export_checkpoint(checkpoint, tmp_path / "model.onnx")
    assert summary["custom_nodes"] == NODES[variant]
    assert summary["outputs"] == (["logits", "gates"] if variant == "ganet" else ["logits"])
    report = checks.validate_checkpoint(checkpoint, tmp_path / "model.onnx")
    assert report.passed, report.failure()
