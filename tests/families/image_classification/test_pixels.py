"""An image file -> the model's input, by the stored preprocessing; every bad image is one
DataError naming it."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from attndeploy.errors import DataError
from attndeploy.families.image_classification.pixels import (
    MAX_PIXELS,
    Preprocessing,
    decode_image,
    model_inputs,
)


def _encoded(array: np.ndarray, fmt: str = "PNG", mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array, mode=mode).save(buffer, format=fmt)
    return buffer.getvalue()


def test_a_grey_png_decodes_to_its_pixels_as_one_channel():
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    pixels = decode_image(_encoded(array), 1)
    assert pixels.shape == (1, 3, 4) and (pixels[0] == array).all()


def test_rgb_is_channels_first_and_grey_converts_to_three_equal_channels():
    rgb = np.zeros((2, 3, 3), dtype=np.uint8)
    rgb[..., 0], rgb[..., 2] = 200, 10
    pixels = decode_image(_encoded(rgb), 3)
    assert pixels.shape == (3, 2, 3) and (pixels[0] == 200).all() and (pixels[2] == 10).all()
    grey = decode_image(_encoded(np.full((2, 2), 77, dtype=np.uint8)), 3)
    assert grey.shape == (3, 2, 2) and (grey == 77).all()


def test_a_wrong_size_is_refused_unless_resizing_is_on():
    data = _encoded(np.zeros((6, 6), dtype=np.uint8))
    with pytest.raises(DataError, match="6x6 .*takes 8x8 and resizing is off"):
        decode_image(data, 1, (8, 8), where="x.png")
    assert decode_image(data, 1, (8, 8), resize=True).shape == (1, 8, 8)


@pytest.mark.parametrize("data, message", [
    (b"not an image at all", "not a PNG or JPEG image"),
    (_encoded(np.zeros((4, 4), dtype=np.uint16) + 300), "16 bits"),
])
def test_undecodable_and_16_bit_images_are_refused_naming_the_file(data, message):
    with pytest.raises(DataError, match=f"^bad.png: .*{message}"):
        decode_image(data, 1, where="bad.png")


def test_a_gif_is_not_taken():
    with pytest.raises(DataError, match="a GIF image; PNG or JPEG expected"):
        decode_image(_encoded(np.zeros((4, 4), dtype=np.uint8), "GIF"), 1)


def test_an_image_over_the_pixel_cap_is_refused_before_it_is_decoded(monkeypatch):
    import attndeploy.families.image_classification.pixels as pixels

    monkeypatch.setattr(pixels, "MAX_PIXELS", 15)
    with pytest.raises(DataError, match="4x4 is over the 15-pixel limit"):
        decode_image(_encoded(np.zeros((4, 4), dtype=np.uint8)), 1)
    assert MAX_PIXELS >= 1_000_000


def test_a_jpeg_decodes():
    array = np.full((8, 8, 3), 128, dtype=np.uint8)
    pixels = decode_image(_encoded(array, "JPEG"), 3, (8, 8))
    assert pixels.shape == (3, 8, 8) and abs(int(pixels.mean()) - 128) <= 2


def test_preprocessing_normalises_per_channel_and_round_trips_as_json(tmp_path):
    prep = Preprocessing(channels=1, height=2, width=2, mean=(0.5,), std=(0.25,))
    assert Preprocessing.from_json(prep.to_json()) == prep
    values = prep.normalise(np.array([[[[0, 255], [255, 0]]]], dtype=np.uint8))
    assert np.allclose(values, [[[[-2.0, 2.0], [2.0, -2.0]]]])
    path = tmp_path / "a.png"
    Image.fromarray(np.array([[0, 255], [255, 0]], dtype=np.uint8)).save(path)
    assert np.allclose(model_inputs([path], prep), values)


@pytest.mark.parametrize("raw, message", [
    ({"channels": 2, "height": 2, "width": 2, "mean": [0, 0], "std": [1, 1]}, "1 .* or 3"),
    ({"channels": 1, "height": 0, "width": 2, "mean": [0], "std": [1]}, "height must be"),
    ({"channels": 1, "height": 2, "width": 2, "mean": [0], "std": [0]}, "std positive"),
    ({"channels": 1, "height": 2, "width": 2, "mean": [0, 1], "std": [1]}, "one value per"),
    ({"channels": 1, "height": 2, "width": 2, "mean": [0]}, "missing \\['std'\\]"),
    ([1, 2], "a JSON object"),
])
def test_a_bad_stored_preprocessing_is_one_data_error(raw, message):
    with pytest.raises(DataError, match=message):
        Preprocessing.from_dict(raw)
