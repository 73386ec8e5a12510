"""train_folder: an image folder in, a checkpoint out that keeps the preprocessing it measured,
the accuracy beside logistic regression's, and reads back as the same model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attndeploy.data.images import load_image_folder
from attndeploy.errors import CheckpointError, DataError
from attndeploy.families.image_classification.training import train_folder
from attndeploy.models.vision.checkpoint import load_image_model
from tests.families.image_classification.images import TINY, write_folder

pytestmark = pytest.mark.usefixtures("torch_defaults")
RECIPE = {"steps": 40, "batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 4}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    folder = write_folder(root / "data", per_class=12)
    threads = torch.get_num_threads()  # restored: later tests (the golden losses) read it
    torch.set_num_threads(1)
    try:
        result = train_folder(folder, model={"variant": "evolving", "architecture": "aacnn", **{
            k: v for k, v in TINY.items() if k != "n_layers"}, "n_layers": 2},
            training=RECIPE, eval_fraction=0.25, out=root / "ckpt")
    finally:
        torch.set_num_threads(threads)
    return folder, root / "ckpt", result


def test_the_model_learns_the_folder_beside_logistic_regression(trained):
    _, checkpoint, result = trained
    raw = json.loads((checkpoint / "config.json").read_text())
    assert raw["metrics"] == result.metrics
    assert result.metrics["accuracy"] >= 0.8 and result.metrics["baseline_accuracy"] >= 0.8
    assert raw["data"]["train_images"] == 27 and raw["data"]["held_out_images"] == 9
    assert raw["labels"] == ["left", "right", "top"]
    assert raw["training"]["steps"] == 40 and raw["model"]["variant"] == "evolving"


def test_the_preprocessing_is_measured_on_the_training_images_and_stored(trained):
    folder, checkpoint, result = trained
    loaded = load_image_model(checkpoint)
    assert loaded.preprocessing == result.preprocessing
    assert (loaded.preprocessing.channels, loaded.preprocessing.height) == (1, 8)
    everything = load_image_folder(folder).pixels / 255.0
    # measured on the training part (27 of 36 images), so near the whole folder's, not equal
    assert loaded.preprocessing.mean[0] == pytest.approx(float(everything.mean()), abs=0.05)
    assert loaded.preprocessing.mean[0] != pytest.approx(float(everything.mean()), abs=1e-9)


def test_the_checkpoint_reads_back_as_the_same_model(trained):
    _, checkpoint, result = trained
    loaded = load_image_model(checkpoint)
    images = torch.randn(3, 1, 8, 8)
    result.model.eval()
    with torch.no_grad():
        assert torch.equal(loaded.model(images)["logits"], result.model(images)["logits"])


def test_a_changed_weights_file_is_refused(trained, tmp_path):
    import shutil

    _, checkpoint, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(checkpoint, copy)
    raw = json.loads((copy / "config.json").read_text())
    raw["weights_sha256"] = "0" * 64
    (copy / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="sha256 differs"):
        load_image_model(copy)


def test_an_existing_checkpoint_is_kept_without_force(trained):
    folder, checkpoint, _ = trained
    before = (checkpoint / "model.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match="exists"):
        train_folder(folder, model={"variant": "standard"}, training=RECIPE,
                     eval_fraction=0.25, out=checkpoint)
    assert (checkpoint / "model.safetensors").read_bytes() == before


def test_a_time_budget_plans_fewer_steps(tmp_path):
    folder = write_folder(tmp_path / "data", per_class=4)
    result = train_folder(folder, model={"variant": "standard", **TINY},
                          training={**RECIPE, "steps": 100000, "max_seconds": 0.5},
                          eval_fraction=0.25, out=tmp_path / "ckpt")
    assert 20 <= result.summary["steps"] < 100000


@pytest.mark.parametrize("layout, message", [
    ("missing", "no such image folder"),
    ("one class", "at least 2"),
])
def test_a_folder_that_cannot_train_writes_nothing(tmp_path, layout, message):
    folder = tmp_path / "data"
    if layout == "one class":
        write_folder(folder, per_class=3, classes=("only",))
    with pytest.raises(DataError, match=message):
        train_folder(folder, model={}, training=RECIPE, eval_fraction=0.25, out=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_logistic_regression_fits_separable_pixels():
    from attndeploy.models.vision.logistic import fit_logistic, logistic_accuracy

    rng = np.random.default_rng(0)
    y = torch.from_numpy(rng.integers(0, 2, 200))
    x = torch.randn(200, 1, 2, 2) + 3 * y[:, None, None, None].float()
    assert logistic_accuracy(fit_logistic(x, y, 2), x, y) > 0.95


def test_the_no_attention_baseline_trains_and_says_what_it_is(tmp_path):
    folder = write_folder(tmp_path / "data", per_class=6)
    sizes = {k: v for k, v in TINY.items() if k != "n_layers"}
    result = train_folder(folder, model={"attention": False, "n_layers": 1, **sizes},
                          training={**RECIPE, "steps": 10}, eval_fraction=0.25,
                          out=tmp_path / "ckpt")
    loaded = load_image_model(tmp_path / "ckpt")
    assert loaded.config.attention is False
    assert not any("attention" in name for name, _ in loaded.model.named_modules())
    assert list(result.summary)[0] == "network"
    assert result.summary["network"] == "vit without attention"
    assert set(result.metrics) == {"accuracy", "baseline_accuracy"}


def test_a_variant_without_attention_is_refused_before_training(tmp_path):
    from attndeploy.errors import ConfigError

    folder = write_folder(tmp_path / "data", per_class=2)
    with pytest.raises(ConfigError, match="no attention variant"):
        train_folder(folder, model={"attention": False, "variant": "ganet", **TINY},
                     training=RECIPE, eval_fraction=0.25, out=tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()
