"""Image folders (one subfolder per class, or train/ and test/ of them) and IDX files."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attndeploy.data.images import (
    load_image_folder,
    load_training_images,
    measure_preprocessing,
    read_idx,
    read_idx_pair,
    split_images,
    write_image_folder,
)
from attndeploy.errors import DataError
from tests.families.image_classification.images import CLASSES, write_folder


def test_a_folder_reads_as_sorted_classes_with_their_labels(tmp_path):
    write_folder(tmp_path, per_class=3)
    images = load_image_folder(tmp_path)
    assert images.class_names == tuple(sorted(CLASSES))
    assert images.pixels.shape == (9, 1, 8, 8) and images.pixels.dtype == np.uint8
    assert images.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all(Path(source).parent.name == images.class_names[label]
               for source, label in zip(images.sources, images.labels, strict=True))


def test_the_first_image_sets_size_and_channels_and_others_must_match(tmp_path):
    write_folder(tmp_path, per_class=2, channels=3)
    assert load_image_folder(tmp_path).pixels.shape[1:] == (3, 8, 8)
    Image.fromarray(np.zeros((5, 5, 3), dtype=np.uint8)).save(tmp_path / "top" / "zz.png")
    with pytest.raises(DataError, match="zz.png: 5x5 .*takes 8x8"):
        load_image_folder(tmp_path)
    assert load_image_folder(tmp_path, resize=True).pixels.shape == (7, 3, 8, 8)


@pytest.mark.parametrize("layout, message", [
    ({"only": 2}, "at least 2"),
    ({"a": 2, "b": 0}, "b: a class folder without PNG or JPEG images"),
])
def test_a_folder_without_two_classes_of_images_is_refused(tmp_path, layout, message):
    for name, count in layout.items():
        (tmp_path / name).mkdir()
        for index in range(count):
            Image.fromarray(np.zeros((4, 4), dtype=np.uint8)).save(tmp_path / name / f"{index}.png")
    with pytest.raises(DataError, match=message):
        load_image_folder(tmp_path)


def test_a_missing_folder_is_one_data_error(tmp_path):
    with pytest.raises(DataError, match="no such image folder"):
        load_training_images(tmp_path / "nope", eval_fraction=0.2, seed=0)


def test_the_split_holds_out_a_share_of_every_class_reproducibly(tmp_path):
    images = load_image_folder(write_folder(tmp_path, per_class=10))
    train, held = split_images(images, 0.2, seed=3)
    assert len(train) == 24 and len(held) == 6
    assert sorted(held.labels.tolist()) == [0, 0, 1, 1, 2, 2]
    assert not set(train.sources) & set(held.sources)
    assert split_images(images, 0.2, seed=3)[1].sources == held.sources


def test_train_and_test_subfolders_are_the_fixed_split(tmp_path):
    write_folder(tmp_path / "train", per_class=4, seed=1)
    write_folder(tmp_path / "test", per_class=2, seed=2, classes=("left", "top"))
    train, test = load_training_images(tmp_path, eval_fraction=0.5, seed=0)
    assert len(train) == 12 and len(test) == 4
    assert test.class_names == train.class_names  # test's classes keep the training indices
    assert sorted(set(test.labels.tolist())) == [0, 2]


def test_a_test_class_the_training_part_lacks_is_refused(tmp_path):
    write_folder(tmp_path / "train", per_class=2, classes=("a", "b"))
    write_folder(tmp_path / "test", per_class=2, classes=("a", "c"))
    with pytest.raises(DataError, match=r"classes \['c'\] are not the model's"):
        load_training_images(tmp_path, eval_fraction=0.5, seed=0)


def test_preprocessing_is_measured_on_the_pixels():
    pixels = np.zeros((2, 1, 2, 2), dtype=np.uint8)
    pixels[0] = 255
    prep = measure_preprocessing(pixels)
    assert (prep.channels, prep.height, prep.width) == (1, 2, 2)
    assert prep.mean == pytest.approx((0.5,)) and prep.std == pytest.approx((0.5,))
    assert measure_preprocessing(np.zeros((3, 1, 2, 2), dtype=np.uint8)).std == (1.0,)


def _idx(path: Path, magic: int, shape: tuple[int, ...], body: bytes, packed: bool = True):
    header = magic.to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in shape)
    (gzip.open if packed else open)(path, "wb").write(header + body)
    return path


def test_idx_images_and_labels_read_gzipped_or_plain(tmp_path):
    body = bytes(range(2 * 2 * 3))
    images = _idx(tmp_path / "i.gz", 0x803, (2, 2, 3), body)
    labels = _idx(tmp_path / "l", 0x801, (2,), bytes([7, 1]), packed=False)
    pixels, values = read_idx_pair(images, labels)
    assert pixels.shape == (2, 2, 3) and pixels[1, 1, 2] == 11 and values.tolist() == [7, 1]


@pytest.mark.parametrize("magic, shape, body, message", [
    (0x803, (2, 2, 2), bytes(7), "says \\[2, 2, 2\\] \\(8 bytes\\) but 7 follow"),
    (0x0D03, (1, 1, 1), bytes(1), "not a uint8 IDX file"),
])
def test_a_broken_idx_file_names_itself(tmp_path, magic, shape, body, message):
    with pytest.raises(DataError, match=f"x.gz: .*{message}"):
        read_idx(_idx(tmp_path / "x.gz", magic, shape, body))


def test_written_folders_read_back_as_the_same_images_and_labels(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(5, 4, 4)).astype(np.uint8)
    labels = np.array([1, 0, 1, 1, 0])
    counts = write_image_folder(pixels, labels, ("cat", "dog"), tmp_path)
    assert counts == {"cat": 2, "dog": 3}
    back = load_image_folder(tmp_path)
    order = np.argsort([Path(s).stem for s in back.sources])  # the written index
    assert (back.pixels[order, 0] == pixels).all()
    assert back.labels[order].tolist() == labels.tolist()
