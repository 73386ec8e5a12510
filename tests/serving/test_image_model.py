"""The image model `<name>_image` (`packaging/image_model.py`): what `package` writes for an
image export, check-repo's view of it, and its generated model.py run in-process on the python
backend's stand-in: good images answered as in-process `predict` answers them, each bad kind
an INVALID_ARG error for its own request while the rest of the batch is answered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import DataError, ServerError
from attndeploy.families.image_classification import runtime as image_runtime
from attndeploy.families.image_classification.pixels import (
    META_PREPROCESSING,
    Preprocessing,
    decode_image,
)
from attndeploy.families.image_classification.predict import ImageClassifier
from attndeploy.serving.client.image import (
    decode_image_answer,
    image_feed,
    infer_images,
    served_image_family,
)
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from tests.serving.image_fixtures import BAD_IMAGES, good_image, tiny_export
from tests.serving.test_model_py import FakeRequest, load_model
from tests.serving.text_model_standin import own_modules, set_param

LABELS = ["left", "right", "top"]


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_export(tmp_path_factory.mktemp("image_export"))


@pytest.fixture(scope="module")
def repo(export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("image_repo") / "repo"
    written = package_model(export, repo, PackageOptions(name="img"))
    assert [(m.name, m.to_dict()["kind"]) for m in written] == [("img", "pixels"),
                                                                 ("img_image", "image")]
    return repo


def config(folder: Path) -> mc.ModelConfig:
    cfg = mc.ModelConfig()
    text_format.Parse((folder / "config.pbtxt").read_text(), cfg)
    return cfg


def test_package_writes_the_pixel_model_and_the_image_model(repo: Path, export: Path) -> None:
    image = config(repo / "img_image")
    assert image.backend == "python"
    assert [(i.name, mc.DataType.Name(i.data_type), list(i.dims)) for i in image.input] == [
        ("image", "TYPE_STRING", [1])]
    assert [(o.name, mc.DataType.Name(o.data_type), list(o.dims)) for o in image.output] == [
        ("label", "TYPE_STRING", [1]), ("label_id", "TYPE_FP32", [1]),
        ("logits", "TYPE_FP32", [3]), ("probabilities", "TYPE_FP32", [3])]
    assert json.loads(image.parameters["LABEL_NAMES"].string_value) == LABELS
    # the preprocessing is the export's metadata, byte for byte: never re-guessed
    metadata = {p.key: p.value for p in onnx.load(str(export)).metadata_props}
    assert (repo / "img_image" / "preprocessing.json").read_text() == \
        metadata[META_PREPROCESSING] + "\n"
    assert (repo / "img_image" / "1" / "model.onnx").read_bytes() == export.read_bytes()
    assert (repo / "img_image" / "1" / "attndeploy" / "families" / "image_classification" /
            "pixels.py").is_file()
    pixel = config(repo / "img")  # the export's own tensors, as a generic model
    assert [(i.name, list(i.dims)) for i in pixel.input] == [("pixel_values", [1, 8, 8])]
    assert [o.name for o in pixel.output] == ["logits"]


def test_check_repo_passes_a_packaged_image_model(repo: Path) -> None:
    report = check_repository(repo)
    assert report.passed, report.summary()
    assert report.models == ["img", "img_image"]


def test_check_repo_finds_a_changed_copy_and_changed_preprocessing(repo: Path,
                                                                   tmp_path: Path) -> None:
    copy = shutil.copytree(repo, tmp_path / "repo")
    pixels = copy / "img_image" / "1" / "attndeploy" / "families" / "image_classification" / \
        "pixels.py"
    pixels.write_text(pixels.read_text() + "\n# edited\n")
    stored = json.loads((copy / "img_image" / "preprocessing.json").read_text())
    (copy / "img_image" / "preprocessing.json").write_text(json.dumps({**stored, "height": 9}))
    messages = [f.message for f in check_repository(copy).errors]
    assert any("pixels.py is missing or differs" in m for m in messages), messages
    assert any("preprocessing.json is missing or differs" in m for m in messages), messages


def test_package_refuses_an_existing_image_model_without_force(export: Path,
                                                              tmp_path: Path) -> None:
    from attndeploy.errors import RepositoryError

    package_model(export, tmp_path / "repo", PackageOptions(name="img"))
    shutil.rmtree(tmp_path / "repo" / "img")  # only the image model is left in the way
    with pytest.raises(RepositoryError, match="img_image already exist"):
        package_model(export, tmp_path / "repo", PackageOptions(name="img"))
    assert not (tmp_path / "repo" / "img").exists()  # all or nothing
    package_model(export, tmp_path / "repo", PackageOptions(name="img", force=True))
    assert check_repository(tmp_path / "repo").passed


# --------------------------------------------------------------------------- model.py in-process


@pytest.fixture
def model(repo: Path, monkeypatch: pytest.MonkeyPatch):
    with own_modules():
        yield load_model(repo, "img_image", monkeypatch)


def request(*images: bytes) -> FakeRequest:
    return FakeRequest(image=image_feed(list(images))["image"])


def test_good_images_are_answered_as_predict_answers_them(model, export: Path,
                                                          tmp_path: Path) -> None:
    images = [good_image(label, seed=label) for label in range(3)]
    (response,) = model.execute([request(*images)])
    assert response.error is None
    paths = []
    for index, data in enumerate(images):
        paths.append(tmp_path / f"{index}.png")
        paths[-1].write_bytes(data)
    expected = ImageClassifier(export, threads=1).predict(paths)
    records = decode_image_answer(response.outputs, image_runtime, LABELS)
    assert [r["label"] for r in records] == [e["label"] for e in expected]
    assert [r["label_id"] for r in records] == [e["label_id"] for e in expected]
    for record, want in zip(records, expected, strict=True):
        np.testing.assert_allclose(list(record["logits"].values()),
                                   list(want["logits"].values()), atol=1e-5)


@pytest.mark.parametrize("kind", list(BAD_IMAGES))
def test_a_bad_image_is_an_error_for_its_request_alone(model, kind: str) -> None:
    data, message = BAD_IMAGES[kind]
    good = good_image(0)
    first, bad, last = model.execute([request(good), request(good, data), request(good)])
    assert bad.error is not None and bad.error.code == "INVALID_ARG"
    assert bad.error.msg.startswith("image 1: ") and message in bad.error.msg, bad.error.msg
    for answered in (first, last):
        assert answered.error is None
        assert answered.outputs["label"].shape == (1, 1)


def test_a_jpeg_is_read_as_a_png_is(model) -> None:
    (response,) = model.execute([request(good_image(1, format="JPEG"))])
    assert response.error is None and response.outputs["logits"].shape == (1, 3)


def test_a_request_over_max_request_bytes_is_refused_before_decoding(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    copy = shutil.copytree(repo, tmp_path / "repo")
    set_param(copy / "img_image", "MAX_REQUEST_BYTES", "100")
    with own_modules():
        small = load_model(copy, "img_image", monkeypatch)
    (response,) = small.execute([request(b"x" * 101)])
    assert response.error.code == "INVALID_ARG"
    assert "101 bytes, more than the limit of 100 bytes per request" in response.error.msg


# --------------------------------------------------------------------------- decoding, client


def test_decode_refuses_a_100_megapixel_header_before_reading_pixels() -> None:
    data, _ = BAD_IMAGES["100 megapixels"]
    with pytest.raises(DataError, match="over the 40,000,000-pixel limit"):
        decode_image(data, 1, (8, 8), where="big.png")


def test_decode_refuses_16_bit_rgb_which_pillow_reads_as_8_bit() -> None:
    data, _ = BAD_IMAGES["16-bit RGB"]
    with pytest.raises(DataError, match="big.png: a 16-bit PNG"):
        decode_image(data, 3, (8, 8), where="big.png")


def test_served_image_family_refuses_a_model_that_is_not_an_image_model() -> None:
    with pytest.raises(ServerError, match="send --image-file to its image model cls_image"):
        served_image_family({"parameters": {"HEAD": {"string_value": "classification"}}}, "cls")
    family, names = served_image_family({"parameters": {
        "IMAGE_MODEL": {"string_value": "true"},
        "HEAD": {"string_value": "image_classification"},
        "NUM_LABELS": {"string_value": "3"}, "CONTRACT_VERSION": {"string_value": "2"},
        "LABEL_NAMES": {"string_value": json.dumps(LABELS)}}}, "m_image")
    assert family is image_runtime and names == tuple(LABELS)


def test_infer_images_reads_every_file_before_any_request(tmp_path: Path) -> None:
    good = tmp_path / "good.png"
    good.write_bytes(good_image(0))
    with pytest.raises(DataError, match="missing.png: cannot read"):
        infer_images(url="127.0.0.1:1", model="m_image", images=[good, tmp_path / "missing.png"])
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(DataError, match="empty.png: an empty file"):
        infer_images(url="127.0.0.1:1", model="m_image", images=[tmp_path / "empty.png"])


def test_preprocessing_round_trips_through_the_stored_file(repo: Path, export: Path) -> None:
    stored = Preprocessing.from_json((repo / "img_image" / "preprocessing.json").read_text())
    assert stored == ImageClassifier(export, threads=1).preprocessing


# --------------------------------------------------------------------------- the load test's oracle


def test_the_load_test_oracle_is_what_the_served_model_answers(model, repo: Path) -> None:
    from attndeploy.serving.loadtest import LoadTestConfig
    from attndeploy.serving.loadtest.images import ImageReference, build_image_pool, image_source
    from attndeploy.serving.loadtest.stats import compare_outputs

    onnx_path = repo / "img_image" / "1" / "model.onnx"
    source = image_source(onnx_path)
    images = [(f"{i}", good_image(i % 3, seed=i)) for i in range(5)]
    (entries,) = build_image_pool(LoadTestConfig(model="img_image", batch=2), images)
    assert len(entries) == 3  # 5 images, 2 a request, wrapping around
    reference = ImageReference(onnx_path, source, ["label", "label_id", "logits",
                                                   "probabilities"])
    for index, entry in enumerate(entries):
        (answer,) = model.execute([FakeRequest(image=entry.feed["image"])])
        expected = reference.expected((0, index), entry.feed)
        assert compare_outputs(answer.outputs, expected, atol=1e-5, rtol=1e-4).passed
        wrong = {**answer.outputs, "label": np.array([[b"nope"]] * 2, dtype=object)}
        check = compare_outputs(wrong, expected, atol=1e-5, rtol=1e-4)
        assert not check.passed and "'label' differs" in check.reason


def test_the_load_test_refuses_a_folder_image_the_model_would_refuse(repo: Path,
                                                                      tmp_path: Path) -> None:
    from attndeploy.errors import LoadTestError
    from attndeploy.serving.loadtest.images import check_images, image_source, read_image_folder

    source = image_source(repo / "img_image" / "1" / "model.onnx")
    with pytest.raises(LoadTestError, match="holds no PNG or JPEG file"):
        read_image_folder(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "1.png").write_bytes(good_image(0))
    (tmp_path / "a" / "2.png").write_bytes(BAD_IMAGES["wrong size"][0])
    images = read_image_folder(tmp_path)
    assert [Path(path).name for path, _ in images] == ["1.png", "2.png"]
    with pytest.raises(LoadTestError, match="2.png: 9x8 .* would refuse every request"):
        check_images(images, source)


def test_infer_with_text_or_ids_to_an_image_model_says_to_send_images(repo: Path) -> None:
    from attndeploy.serving.client.infer import infer_request

    for kwargs in ({"text": "hi"}, {"ids": [3, 4]}):
        with pytest.raises(DataError, match="'img_image' is an image model: send image files "
                                            "with --image-file"):
            infer_request(url="127.0.0.1:1", model="img_image", repo=repo, **kwargs)


@pytest.mark.parametrize("variant", ["ganet", "evolving"])
def test_every_variant_s_custom_graph_is_served_as_predict_labels(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GA-Net (its `gates` output beside the logits) and Evolving Attention (attndeploy nodes
    with model-local functions) run in the image model's own onnxruntime session."""
    export = tiny_export(tmp_path / "export", variant=variant)
    package_model(export, tmp_path / "repo", PackageOptions(name=variant))
    assert check_repository(tmp_path / "repo").passed
    images = [good_image(label, seed=label + 10) for label in range(3)]
    for index, data in enumerate(images):
        (tmp_path / f"{index}.png").write_bytes(data)
    expected = ImageClassifier(export, threads=1).predict(
        [tmp_path / f"{index}.png" for index in range(3)])
    with own_modules():
        served = load_model(tmp_path / "repo", f"{variant}_image", monkeypatch)
    (response,) = served.execute([request(*images)])
    records = decode_image_answer(response.outputs, image_runtime, LABELS)
    assert [r["label_id"] for r in records] == [e["label_id"] for e in expected]
    for record, want in zip(records, expected, strict=True):
        np.testing.assert_allclose(list(record["probabilities"].values()),
                                   list(want["probabilities"].values()), atol=1e-5)


def test_check_repo_warns_when_this_python_lacks_pillow(
    repo: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "PIL" else real(name, *a))
    report = check_repository(repo)
    assert report.passed  # the repository is right; this Python cannot serve it
    (warning,) = [f for f in report.warnings if f.model == "img_image"]
    assert "decodes with Pillow" in warning.message and "pip install pillow" in warning.message
