"""An image model's requests and their oracle (`<name>_image`, input `image`).

The images are a folder's PNG and JPEG files (`LoadTestConfig.image_folder`: every one below
it, in sorted path order, e.g. Fashion-MNIST's `test/` folder that `benchmarks/fashion_mnist.py`
writes), or, without a folder, `pool_size * batch` PNGs of random pixels of the size and
channels the model's preprocessing records (as an id model gets random ids). Every image is
decoded in process before any load: one the model would refuse (undecodable, another size, 16
bits) fails now, naming its file, since every request that carries it would fail.

The oracle is in-process onnxruntime on the image model's own ONNX file (`model.onnx` in its
version folder): the same bytes decoded and normalised by the same `pixels` code and the logits
decoded by the family's runtime part, in the wire form the served model answers with; labels
must be equal, numbers within the load test's tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, LoadTestError
from attndeploy.families.image_classification.pixels import (
    IMAGE_SUFFIXES,
    Preprocessing,
    decode_image,
)
from attndeploy.runtime.names import LOGITS
from attndeploy.serving.client.image import image_feed, read_image_bytes
from attndeploy.serving.client.triton import make_inputs
from attndeploy.serving.loadtest.config import LoadTestConfig
from attndeploy.serving.loadtest.inputs import _PoolEntry
from attndeploy.serving.packaging.image_model import IMAGE, read_image_source

MAX_FOLDER_IMAGES = 100_000  # a folder with more is refused: the pool is held in memory


@dataclass(frozen=True)
class ImageSource:
    """What the load tester knows of an image model: its preprocessing, labels and family."""

    preprocessing: Preprocessing
    labels: tuple[str, ...]
    family: Any  # the family's runtime part


def image_source(onnx_path: Path) -> ImageSource | None:
    """The image facts of an exported model (None when its family serves no images)."""
    from attndeploy.errors import RepositoryError
    from attndeploy.serving.packaging.onnx_info import load_onnx_graph

    try:
        source = read_image_source(load_onnx_graph(onnx_path), str(onnx_path))
    except RepositoryError as exc:
        raise LoadTestError(str(exc)) from None
    if source is None:
        return None
    return ImageSource(source.preprocessing, source.labels, source.family)


def read_image_folder(folder: Path) -> list[tuple[str, bytes]]:
    """(path, bytes) of every PNG or JPEG file below `folder`, in sorted path order;
    LoadTestError when there is none, too many, or one that cannot be read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LoadTestError(f"the image folder {folder} is not a folder")
    paths = sorted(path for path in folder.rglob("*")
                   if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file())
    if not paths:
        raise LoadTestError(f"the image folder {folder} holds no PNG or JPEG file "
                            f"({', '.join(IMAGE_SUFFIXES)})")
    if len(paths) > MAX_FOLDER_IMAGES:
        raise LoadTestError(f"the image folder {folder} holds {len(paths)} images, more than "
                            f"the {MAX_FOLDER_IMAGES} a load test holds in memory")
    images = []
    for path in paths:
        try:
            images.append((str(path), read_image_bytes(path)))  # infer's reader and its limits
        except DataError as exc:
            raise LoadTestError(str(exc)) from None
    return images


def random_images(config: LoadTestConfig, preprocessing: Preprocessing) -> list[tuple[str, bytes]]:
    """`pool_size * batch` PNGs of random pixels (seeded) of the model's size and channels."""
    import io

    from PIL import Image

    rng = np.random.default_rng(config.seed)
    channels, height, width = preprocessing.shape
    images = []
    for index in range(config.pool_size * config.batch):
        pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels).save(buffer, format="PNG")
        images.append((f"random image {index}", buffer.getvalue()))
    return images


def check_images(images: list[tuple[str, bytes]], source: ImageSource) -> None:
    """Decode every image as the served model will; LoadTestError naming the first it would
    refuse (every request that carries it would fail)."""
    prep = source.preprocessing
    for where, data in images:
        try:
            decode_image(data, prep.channels, (prep.height, prep.width), resize=prep.resize,
                         where=where)
        except DataError as exc:
            raise LoadTestError(f"{exc}; the model would refuse every request that carries "
                                "it") from None


def build_image_pool(config: LoadTestConfig, images: list[tuple[str, bytes]]
                     ) -> list[list[_PoolEntry]]:
    """One group of requests: `image` BYTES [batch, 1] each, the images in order, wrapping
    around, each used at least once."""
    count = -(-len(images) // config.batch)
    entries = []
    for i in range(count):
        rows = [images[(i * config.batch + j) % len(images)][1] for j in range(config.batch)]
        feed = image_feed(rows)
        entries.append(_PoolEntry(feed, make_inputs(feed, config.protocol)))
    return [entries]


class ImageReference:
    """What an image model should answer, from in-process onnxruntime on its ONNX file;
    expected outputs (the wire form) cached per pool entry."""

    def __init__(self, path: Path, source: ImageSource, served_outputs: list[str]) -> None:
        from attndeploy.runtime.sessions import create_session

        self.source = source
        self.session = create_session(path)
        self.input = self.session.get_inputs()[0].name
        self.outputs = [name for name in source.family.FIELDS if name in served_outputs]
        self._cache: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def expected(self, key: tuple[int, int], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if key not in self._cache:
            self._cache[key] = self._expected(feed[IMAGE])
        return self._cache[key]

    def _expected(self, images: np.ndarray) -> dict[str, np.ndarray]:
        prep, family = self.source.preprocessing, self.source.family
        pixels = np.stack([decode_image(data, prep.channels, (prep.height, prep.width),
                                        resize=prep.resize) for data in images[:, 0].tolist()])
        (logits,) = self.session.run([LOGITS], {self.input: prep.normalise(pixels)})  # [B, C]
        rows = family.decode(logits, [1] * len(logits), self.source.labels)
        wire = family.encode_wire(rows, 1)
        return {name: value for name, value in wire.items() if name in self.outputs}
