"""An image file's bytes -> the float tensor an image model takes, by the preprocessing its
checkpoint and its export record (numpy and Pillow, no torch: `predict` and a served model
decode with it).

`Preprocessing` is measured once, when a model is trained (`attndeploy.data.images`), stored in
the checkpoint's config.json and in the export's metadata (`attndeploy.preprocessing`), and
read back from there: nothing at prediction time guesses a size, a channel count or a mean.

Letters: N images, C channels (1 grey, 3 RGB), H height, W width.

    pixels  uint8 [C, H, W]   the decoded image, in the model's mode and size
    values  float32 [C, H, W] (pixels / 255 - mean[c]) / std[c]
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from attndeploy.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
MODES = {1: "L", 3: "RGB"}  # channels -> Pillow's mode
# A larger image is refused by its header, before its pixels are decoded (a decompression bomb):
# 40 million pixels (a 100-megapixel photograph is refused), the same cap for training,
# `predict` and a served image model (`<name>_image`).
MAX_PIXELS = 40_000_000
MAX_SIDE = 4096  # the largest height or width a model may take
MAX_IMAGE_BYTES = 64 * 1024 * 1024  # an encoded image read whole
META_PREPROCESSING = "attndeploy.preprocessing"  # an image export's metadata key: its JSON


@dataclass(frozen=True)
class Preprocessing:
    """What turns an image file into a model's input.

    channels: 1 (grey) or 3 (RGB); the image is converted to that mode.
    height, width: the model's input size.
    mean, std: per channel, on pixels scaled to [0, 1] (measured on the training images).
    resize: an image of another size is resized (bilinear) to height x width; False (default):
        it is refused, naming both sizes.
    """

    channels: int
    height: int
    width: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    resize: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if self.channels not in MODES:
            raise DataError(f"an image model takes 1 (grey) or 3 (RGB) channels, not "
                            f"{self.channels!r}")
        for name in ("height", "width"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SIDE:
                raise DataError(f"image {name} must be an integer in 1..{MAX_SIDE}, got {value!r}")
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise DataError(f"mean and std need one value per channel ({self.channels}), got "
                            f"{len(self.mean)} and {len(self.std)}")
        if not all(np.isfinite(self.mean)) or not all(s > 0 and np.isfinite(s) for s in self.std):
            raise DataError(f"mean must be finite and std positive, got {self.mean}, {self.std}")

    @property
    def shape(self) -> tuple[int, int, int]:
        """[C, H, W]."""
        return (self.channels, self.height, self.width)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mean": list(self.mean), "std": list(self.std)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: Any) -> Preprocessing:
        """The preprocessing a checkpoint or an export stored; DataError naming what is wrong."""
        if not isinstance(raw, dict):
            raise DataError(f"image preprocessing is a JSON object, got {type(raw).__name__}")
        fields = {"channels", "height", "width", "mean", "std", "resize"}
        unknown, missing = sorted(set(raw) - fields), sorted(fields - {"resize"} - set(raw))
        if unknown or missing:
            raise DataError(f"image preprocessing: unknown keys {unknown}, missing {missing}")
        try:
            return cls(**raw)
        except TypeError as exc:
            raise DataError(f"invalid image preprocessing: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> Preprocessing:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise DataError(f"image preprocessing is not JSON ({exc.msg})") from None

    def normalise(self, pixels: np.ndarray) -> np.ndarray:
        """uint8 [..., C, H, W] -> float32 [..., C, H, W]: (pixels / 255 - mean) / std."""
        mean = np.asarray(self.mean, dtype=np.float32)[:, None, None]  # [C, 1, 1]
        std = np.asarray(self.std, dtype=np.float32)[:, None, None]
        return ((pixels.astype(np.float32) / np.float32(255.0)) - mean) / std


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_bit_depth(data: bytes) -> int | None:
    """The bits per sample a PNG's header (IHDR, its first chunk) declares, None for bytes that
    are no PNG. Pillow reads a 16-bit RGB PNG as 8-bit RGB without a word, so the header says."""
    if len(data) < 25 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    return data[24]  # signature 8 + length 4 + type 4 + width 4 + height 4


def decode_image(data: bytes, channels: int, size: tuple[int, int] | None = None, *,
                 resize: bool = False, where: str = "image") -> np.ndarray:
    """Encoded PNG or JPEG bytes -> uint8 [C, H, W] in the mode of `channels`.

    `size` (height, width): the size wanted; another size is resized (bilinear) when `resize`,
    else a DataError naming both. A 16-bit or otherwise high-depth image, an undecodable file,
    and one over MAX_PIXELS are refused (DataError naming `where`): the size and depth come
    from the header, so an image over the cap (a decompression bomb) is refused before its
    pixels are decoded. A palette, grey-alpha or RGBA image is converted (alpha dropped)."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    if len(data) > MAX_IMAGE_BYTES:
        raise DataError(f"{where}: {len(data)} bytes is over the {MAX_IMAGE_BYTES}-byte limit")
    depth = png_bit_depth(data)
    if depth is not None and depth > 8:
        raise DataError(f"{where}: a {depth}-bit PNG (16 bits per channel); 8-bit PNG or JPEG "
                        "expected")
    try:
        with warnings.catch_warnings():  # Pillow's own bomb warning: refused as over the cap
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
        with image:
            if image.format not in ("PNG", "JPEG"):
                raise DataError(f"{where}: a {image.format} image; PNG or JPEG expected")
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise DataError(f"{where}: {width}x{height} is over the "
                                f"{MAX_PIXELS:,}-pixel limit")
            if image.mode in ("I", "I;16", "I;16B", "I;16L", "F") or image.mode.startswith("I;"):
                raise DataError(f"{where}: a {image.mode} image (16 bits or more per channel); "
                                "8-bit PNG or JPEG expected")
            converted = image.convert(MODES[channels])
            if size is not None and (converted.height, converted.width) != tuple(size):
                if not resize:
                    raise DataError(f"{where}: {converted.height}x{converted.width} (height x "
                                    f"width); the model takes {size[0]}x{size[1]} and resizing "
                                    "is off")
                converted = converted.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            pixels = np.asarray(converted, dtype=np.uint8)
    except UnidentifiedImageError:
        raise DataError(f"{where}: not a PNG or JPEG image (cannot decode it)") from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise DataError(f"{where}: over the {MAX_PIXELS:,}-pixel limit ({exc})") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise DataError(f"{where}: cannot decode the image ({exc})") from None
    if pixels.ndim == 2:
        pixels = pixels[None]  # [1, H, W]
    else:
        pixels = np.ascontiguousarray(pixels.transpose(2, 0, 1))  # [H, W, C] -> [C, H, W]
    return pixels


def read_image_bytes(path: Any) -> bytes:
    """The bytes of an image file, unread beyond MAX_IMAGE_BYTES; DataError naming the file
    (what `infer` sends undecoded, and what `read_image_file` decodes)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_IMAGE_BYTES + 1)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise DataError(f"{path}: more than the {MAX_IMAGE_BYTES}-byte limit of an image")
    if not data:
        raise DataError(f"{path}: an empty file, not an image")
    return data


def read_image_file(path: Any, channels: int, size: tuple[int, int] | None = None, *,
                    resize: bool = False) -> np.ndarray:
    """A PNG or JPEG file -> uint8 [C, H, W] (`decode_image`); DataError naming the file."""
    return decode_image(read_image_bytes(path), channels, size, resize=resize, where=str(path))


def model_inputs(paths: Sequence[Any], preprocessing: Preprocessing) -> np.ndarray:
    """Image files -> float32 [N, C, H, W], each decoded and normalised by `preprocessing`."""
    size = (preprocessing.height, preprocessing.width)
    pixels = [read_image_file(path, preprocessing.channels, size, resize=preprocessing.resize)
              for path in paths]
    if not pixels:
        return np.zeros((0, *preprocessing.shape), dtype=np.float32)
    return preprocessing.normalise(np.stack(pixels))  # [N, C, H, W]
