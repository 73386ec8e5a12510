"""The image model `<name>_image`: encoded PNG or JPEG bytes in, label out, served beside the
pixel model `<name>` (issue #53; docs/images.md, "Serving").

`attndeploy package` of an export whose family declares `SERVED_INPUT = "image"` in its runtime
part (image-classification) writes two models, all or none:

```
<name>/                       the pixel model: the export's own inputs and outputs
                              (`pixel_values` FP32 [C, H, W] -> `logits`, GA-Net's `gates`),
                              packaged as a generic model (`generic.py`) in the chosen flavour(s)
<name>_image/config.pbtxt     python backend; `image` BYTES [1] in; dynamic batching
<name>_image/labels.txt       the label names
<name>_image/preprocessing.json
                              the export's metadata `attndeploy.preprocessing`, byte for byte
<name>_image/<v>/model.py     generated from templates/image_model.py.tmpl
<name>_image/<v>/model.onnx   the export, byte for byte (run in this model's own process)
<name>_image/<v>/attndeploy/  copies of attndeploy's errors, the contract, the family's
                              `pixels.py` (decode and normalise) and its runtime part
```

The image model needs nothing of `<name>` at run time: it holds its own copy of the ONNX (an
image model is small; serving `<name>_image` alone works, and check-repo checks one folder).
It decodes each image with the shipped `pixels.decode_image` (Pillow: `pillow` is a dependency
of attndeploy, so the Python `attndeploy serve` runs the python backend with has it) and
normalises by `preprocessing.json`, which is the export's metadata: nothing is re-guessed.

Interface (batch implicit): input `image` BYTES [1] (one encoded image per row); outputs the
family's fields as its runtime part declares them (`wire_fields`: `label` BYTES [1],
`label_id` FP32 [1], `logits` and `probabilities` FP32 [num_labels]). A bad image (undecodable,
not PNG or JPEG, 16 bits per channel, another size while the preprocessing does not resize,
more than `pixels.MAX_PIXELS` pixels by its header: refused before its pixels are decoded) or a
request over MAX_REQUEST_BYTES is answered with an INVALID_ARG error naming the row; the other
requests of the batch go on and the model stays up.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import AttnDeployError, ConfigError, RepositoryError
from attndeploy.families.image_classification import PIXEL_VALUES, pixels
from attndeploy.output_set import write_files
from attndeploy.runtime.contract import CONTRACT_VERSION, PARAM_CONTRACT_VERSION, PARAM_LABEL_NAMES
from attndeploy.runtime.families import runtime_part
from attndeploy.runtime.names import META_CONFIG, META_HEAD, META_LABELS, META_VARIANT
from attndeploy.runtime.shipping import ShippedModule, family_runtime_shipment
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.model_template import (
    _generate,
    parse_header,
    template_digest,
)

IMAGE = "image"  # the input, and the `SERVED_INPUT` a family's runtime part declares
IMAGE_SUFFIX = "_image"
IMAGE_TEMPLATE_RESOURCE = "image_model.py.tmpl"
PREPROCESSING_FILE = "preprocessing.json"
FAMILY_FILE = "family_runtime.json"  # which shipped modules decode (as a text model's)
PARAM_IMAGE_MODEL = "IMAGE_MODEL"  # "true": marks an image model's config
# What the image model ships of attndeploy (imports first); the family's pixels and runtime
# part follow, by their module's own file (`family_runtime_shipment`).
SHIPPED_MODULES: tuple[tuple[str, str], ...] = (
    ("attndeploy", "attndeploy/__init__.py"),
    ("attndeploy.errors", "attndeploy/errors.py"),
    ("attndeploy.runtime", "attndeploy/runtime/__init__.py"),
    ("attndeploy.runtime.contract", "attndeploy/runtime/contract.py"),
)
_CONFIG_TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32"}  # wire datatype -> config's


@dataclass(frozen=True)
class ImageSource:
    """What packaging reads of an image export's metadata."""

    variant: str
    head: str
    labels: tuple[str, ...]
    preprocessing: pixels.Preprocessing

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @property
    def family(self) -> ModuleType:
        return runtime_part(self.head)


def image_model_name(base: str) -> str:
    return f"{base}{IMAGE_SUFFIX}"


def serves_images(head: str | None) -> bool:
    """Whether the family whose head is `head` declares an image-input served model."""
    try:
        part = runtime_part(head) if head else None
    except ConfigError:
        return False
    return getattr(part, "SERVED_INPUT", None) == IMAGE


def read_image_source(model: onnx.ModelProto, source: str) -> ImageSource | None:
    """The image facts of an export whose family serves images, None for any other model;
    RepositoryError naming what is missing or wrong."""
    meta = {prop.key: prop.value for prop in model.metadata_props}
    head = meta.get(META_HEAD)
    if head is None:  # an export without META_HEAD keeps it in its config
        try:
            head = json.loads(meta.get(META_CONFIG, "{}")).get("head")
        except (ValueError, AttributeError):
            head = None
    if not serves_images(head):
        return None
    try:
        labels = json.loads(meta[META_LABELS])
        preprocessing = pixels.Preprocessing.from_json(meta[pixels.META_PREPROCESSING])
    except KeyError as exc:
        raise RepositoryError(f"{source}: an image export without metadata {exc}; re-export "
                              "it with `attndeploy export`") from None
    except (ValueError, AttnDeployError) as exc:
        raise RepositoryError(f"{source}: unreadable image metadata ({exc})") from None
    if not (isinstance(labels, list) and len(labels) >= 2
            and all(isinstance(label, str) and label and "\n" not in label
                    and "\r" not in label for label in labels)):
        raise RepositoryError(f"{source}: {META_LABELS} must be a JSON list of at least two "
                              "one-line names")
    return ImageSource(meta.get(META_VARIANT, "?"), str(head), tuple(labels), preprocessing)


# --------------------------------------------------------------------------- config and files


def image_outputs(source: ImageSource) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, config data type, dims) of each output: the family's wire fields."""
    return [(field.name, _CONFIG_TYPES[field.datatype], tuple(field.dims))
            for field in source.family.wire_fields(source.num_labels)]


def image_parameters(source: ImageSource, options: Any) -> dict[str, str]:
    """The parameters the generated model.py reads."""
    parameters = {
        PARAM_IMAGE_MODEL: "true",
        cfgmod.PARAM_HEAD: source.head,
        cfgmod.PARAM_NUM_LABELS: str(source.num_labels),
        cfgmod.PARAM_ORT_THREADS: str(options.threads),
        cfgmod.PARAM_MAX_REQUEST_BYTES: str(options.max_request_bytes),
        PARAM_CONTRACT_VERSION: str(CONTRACT_VERSION),
        PARAM_LABEL_NAMES: json.dumps(list(source.labels), ensure_ascii=False),
    }
    if options.execution_env is not None:
        parameters[cfgmod.PARAM_EXECUTION_ENV] = str(options.execution_env.resolve())
    return parameters


def build_image_config(source: ImageSource, options: Any, *, name: str) -> mc.ModelConfig:
    """The `ModelConfig` of image model `name` (options: `PackageOptions`)."""
    cfg = mc.ModelConfig()
    cfg.name = name
    cfg.backend = cfgmod.PYTHON_BACKEND
    cfg.version_policy.specific.versions.append(options.version)
    cfg.max_batch_size = options.max_batch_size
    cfg.dynamic_batching.SetInParent()
    cfg.dynamic_batching.max_queue_delay_microseconds = (
        options.max_queue_delay_us if options.dynamic_batching else 0)
    entry = cfg.input.add()
    entry.name = IMAGE
    entry.data_type = mc.DataType.Value("TYPE_STRING")
    entry.dims.append(1)
    for output, triton_type, dims in image_outputs(source):
        out = cfg.output.add()
        out.name = output
        out.data_type = mc.DataType.Value(triton_type)
        out.dims.extend(dims)
    group = cfg.instance_group.add()
    group.count = options.instances
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    for key, value in image_parameters(source, options).items():
        cfg.parameters[key].string_value = value
    return cfg


def shipped_family(source: ImageSource) -> list[ShippedModule]:
    """The family's modules the image model ships: its pixels (decode, normalise), then its
    runtime part (decode the logits, the wire codec)."""
    return [family_runtime_shipment(pixels), family_runtime_shipment(source.family)]


def shipped_sources(source: ImageSource) -> dict[str, bytes]:
    """{relative path: bytes} of every module an image model ships, from this installation."""
    from importlib import resources

    root = resources.files("attndeploy")
    files = {relative: root.joinpath(*relative.split("/")[1:]).read_bytes()
             for _, relative in SHIPPED_MODULES}
    files.update({module.relative: module.content for module in shipped_family(source)})
    return files


def family_record(source: ImageSource) -> str:
    """The text of FAMILY_FILE: [module name, path in the version folder] of each family module
    the model loads after SHIPPED_MODULES (its pixels, then its runtime part)."""
    return json.dumps([[module.name, module.relative] for module in shipped_family(source)]) + "\n"


def generate_image_model_py() -> str:
    """The full text of an image model's `model.py` for this attndeploy version."""
    from attndeploy import interface

    return _generate(IMAGE_TEMPLATE_RESOURCE, {
        "IMAGE": IMAGE, "PIXEL_VALUES": PIXEL_VALUES, "LOGITS": interface.LOGITS,
        "MODEL_FILE": cfgmod.MODEL_FILE, "LABELS_FILE": cfgmod.LABELS_FILE,
        "PREPROCESSING_FILE": PREPROCESSING_FILE, "FAMILY_FILE": FAMILY_FILE,
        "PARAM_ORT_THREADS": cfgmod.PARAM_ORT_THREADS,
        "PARAM_MAX_REQUEST_BYTES": cfgmod.PARAM_MAX_REQUEST_BYTES,
        "SHIPPED_MODULES": [list(entry) for entry in SHIPPED_MODULES],
    })


def image_model_files(source: ImageSource, preprocessing_json: str, version: int
                      ) -> dict[str, str | bytes]:
    """Files of an image model folder (relative path -> text or bytes), config.pbtxt and the
    ONNX excepted."""
    files: dict[str, str | bytes] = {
        cfgmod.LABELS_FILE: "".join(f"{label}\n" for label in source.labels),
        PREPROCESSING_FILE: preprocessing_json + "\n",
        FAMILY_FILE: family_record(source),
        f"{version}/{cfgmod.MODEL_PY}": generate_image_model_py(),
    }
    for relative, content in shipped_sources(source).items():
        files[f"{version}/{relative}"] = content
    return files


def write_image_model(staging: Path, onnx_path: Path, model: onnx.ModelProto,
                      source: ImageSource, options: Any, *, name: str) -> None:
    """Write every file of image model `name` into the empty folder `staging`."""
    cfg = build_image_config(source, options, name=name)
    (staging / cfgmod.CONFIG_FILE).write_text(cfgmod.serialize_config(cfg), encoding="utf-8")
    raw = next(p.value for p in model.metadata_props if p.key == pixels.META_PREPROCESSING)
    write_files(staging, image_model_files(source, raw, options.version))
    shutil.copyfile(onnx_path, staging / str(options.version) / cfgmod.MODEL_FILE)


# --------------------------------------------------------------------------- reading a repository


def is_image_config(cfg: mc.ModelConfig) -> bool:
    return (cfg.backend == cfgmod.PYTHON_BACKEND
            and cfg.parameters[PARAM_IMAGE_MODEL].string_value == "true"
            if PARAM_IMAGE_MODEL in cfg.parameters else False)


def check_image_model(model: Any, cfg: mc.ModelConfig, versions: list[int]) -> None:
    """check-repo's findings for an image model (`model`: its collector, `error(message)`):
    its model.py and shipped copies this attndeploy's, its ONNX an image export whose labels
    and preprocessing the folder's files repeat, and its config what packaging writes."""
    import importlib.util
    import sys

    from attndeploy.echo import echo
    from attndeploy.serving.packaging.onnx_info import load_onnx_graph

    if importlib.util.find_spec("PIL") is None:  # `attndeploy serve` runs this Python
        model.warning(f"an image model decodes with Pillow, which this Python ({sys.executable}) "
                      "cannot import: `attndeploy serve` would fail to load it; pip install "
                      "pillow")
    for version in versions:
        folder = model.path / str(version)
        onnx_path = folder / cfgmod.MODEL_FILE
        source = None
        try:
            proto = load_onnx_graph(onnx_path) if onnx_path.is_file() else None
            source = read_image_source(proto, f"{version}/{cfgmod.MODEL_FILE}") if proto else None
            if proto is None:
                model.error(f"{version}/{cfgmod.MODEL_FILE} is missing")
            elif source is None:
                model.error(f"{version}/{cfgmod.MODEL_FILE} is not an image export")
        except RepositoryError as exc:
            model.error(str(exc))
        path = folder / cfgmod.MODEL_PY
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        if text is None:
            model.error(f"{version}/{cfgmod.MODEL_PY} is missing (image model)")
        elif text != generate_image_model_py():
            header = parse_header(text)
            model.error(f"{version}/{cfgmod.MODEL_PY} "
                        + ("was not generated by attndeploy" if header is None else
                           f"was generated by attndeploy {echo(header.version)}"
                           if header.digest != template_digest(IMAGE_TEMPLATE_RESOURCE)
                           else "was edited by hand") + "; re-package the model")
        if source is None:
            continue
        for relative, content in shipped_sources(source).items():
            copy = folder / relative
            if not copy.is_file() or copy.read_bytes() != content:
                model.error(f"{version}/{relative} is missing or differs from this "
                            "attndeploy's; re-package the model")
        _check_against_source(model, cfg, source)


def _check_against_source(model: Any, cfg: mc.ModelConfig, source: ImageSource) -> None:
    """The folder's labels, preprocessing and config against the ONNX they came from."""
    labels = model.path / cfgmod.LABELS_FILE
    if not labels.is_file() or tuple(labels.read_text(encoding="utf-8").splitlines()) \
            != source.labels:
        model.error(f"{cfgmod.LABELS_FILE} is missing or differs from the model's labels")
    try:
        stored = pixels.Preprocessing.from_json(
            (model.path / PREPROCESSING_FILE).read_text(encoding="utf-8"))
    except (OSError, AttnDeployError):
        stored = None
    if stored != source.preprocessing:
        model.error(f"{PREPROCESSING_FILE} is missing or differs from the model's metadata")
    inputs = [(e.name, mc.DataType.Name(e.data_type), tuple(e.dims)) for e in cfg.input]
    if inputs != [(IMAGE, "TYPE_STRING", (1,))]:
        model.error(f"the config's inputs are {inputs}; an image model takes {IMAGE!r} "
                    "TYPE_STRING [1]")
    outputs = [(e.name, mc.DataType.Name(e.data_type), tuple(e.dims)) for e in cfg.output]
    if outputs != image_outputs(source):
        model.error(f"the config's outputs are {outputs}, not the family's "
                    f"{image_outputs(source)}")
