"""Image files sent to a served image model (`<name>_image`, `packaging/image_model.py`): the
encoded bytes as they are, one image per request row, and the answer decoded by the image
family's runtime part with the label names the model's served configuration carries (no
repository needed). What `attndeploy infer --image-file` and the image load test send.

Each image is read whole (at most `pixels.MAX_IMAGE_BYTES`) and sent undecoded: the server
decodes and preprocesses it by the export's recorded preprocessing, so a client needs neither
Pillow nor the model. A bad image is the server's per-request error (INVALID_ARG), raised here as
one ServerError naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ServerError
from attndeploy.families.image_classification.pixels import read_image_bytes
from attndeploy.families.registry import heads
from attndeploy.runtime.contract import served_label_names
from attndeploy.runtime.families import runtime_part
from attndeploy.serving.client.triton import Protocol, TritonRunner, as_protocol
from attndeploy.serving.packaging.image_model import IMAGE, IMAGE_SUFFIX, PARAM_IMAGE_MODEL
from attndeploy.serving.packaging.model_config import PARAM_HEAD, PARAM_NUM_LABELS


def image_feed(images: Sequence[bytes]) -> dict[str, np.ndarray]:
    """An image model's request: `image` BYTES [batch, 1], each row one encoded file."""
    return {IMAGE: np.array([[data] for data in images], dtype=object)}  # [batch, 1]


def served_image_family(config: Mapping[str, Any], model: str) -> tuple[Any, tuple[str, ...]]:
    """(the family's runtime part, the label names) of a served image model's config; a
    ServerError when `model` is not an image model."""
    parameters = {key: value.get("string_value", "")
                  for key, value in config.get("parameters", {}).items()}
    head = parameters.get(PARAM_HEAD, "")
    if parameters.get(PARAM_IMAGE_MODEL) != "true" or head not in heads():
        raise ServerError(f"model {model!r} is not an image model (it takes no encoded images); "
                          f"send --image-file to its image model {model}{IMAGE_SUFFIX}"
                          if not model.endswith(IMAGE_SUFFIX) else
                          f"model {model!r} is not an image model packaged by this attndeploy")
    raw = parameters.get(PARAM_NUM_LABELS, "")
    names = served_label_names(parameters, int(raw) if raw.isdigit() else -1, model)
    return runtime_part(head), names


def decode_image_answer(outputs: Mapping[str, np.ndarray], family: Any,
                        names: Sequence[str]) -> list[dict[str, Any]]:
    """One record (the family's fields: label, label_id, logits and probabilities by label)
    per row of an image model's answer."""
    rows = len(np.asarray(outputs[family.FIELDS[0]]))
    return [family.record(family.decode_wire(outputs, row, 1), names) for row in range(rows)]


def infer_images(
    *,
    url: str | None = None,
    model: str,
    images: Sequence[Path | str],
    timeout_s: float = 10.0,
    protocol: Protocol | str = Protocol.GRPC,
) -> list[dict[str, Any]]:
    """Send each image file to image model `model` (one request each, in order); return per
    image `image` (its path) and the family's record (the records of in-process `predict`).
    Every file is read before the first request; the first refused image stops with its
    error, naming the file."""
    protocol = as_protocol(protocol)
    if not images:
        raise DataError("give at least one --image-file FILE")
    payloads = [read_image_bytes(path) for path in images]
    records = []
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        family, names = served_image_family(runner.model_config(), model)
        for path, data in zip(images, payloads, strict=True):
            try:
                outputs = runner.infer(image_feed([data]))
            except ServerError as exc:
                raise ServerError(f"{path}: {exc}") from None
            (record,) = decode_image_answer(outputs, family, names)
            records.append({"image": str(path), **record})
    return records
