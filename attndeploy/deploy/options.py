"""What `attndeploy deploy kubernetes` is asked for, checked before anything is written.

`KubernetesOptions` is frozen and validated in `__post_init__`: every bad value is one
`DeployError` that names the option and what to do. Two values are parsed into small records:
the server image into the Triton release it runs (`image_release`, from check-repo's table, so
the manifests and the offline checks agree on the onnxruntime version), and `--model-store` into
a `ModelStore` (`parse_model_store`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from attndeploy.errors import DeployError
from attndeploy.serving.packaging.check_repo import TRITON_RELEASE, TRITON_RELEASES, TritonRelease

NGC_IMAGE = "nvcr.io/nvidia/tritonserver"
DEFAULT_IMAGE = f"{NGC_IMAGE}:{TRITON_RELEASE.ngc}-py3"
DEFAULT_NAME = "attndeploy-triton"
DEFAULT_REPLICAS = 2
DEFAULT_MAX_REPLICAS = 4

# A DNS-1123 label: Service names (and so the name of every object here) must be one.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A DNS-1123 subdomain: PersistentVolumeClaim names.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A Kubernetes resource quantity ("500m", "2Gi", "1.5").
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
# A Triton container tag: "<YY.MM>-py3" is the full image (with the onnxruntime backend); the
# "-pyt-python-py3", "-trtllm-python-py3"... variants have no onnxruntime backend.
_TRITON_TAG = re.compile(r"^(?P<release>\d{2}\.\d{2})-py3$")
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_.-]+)?(@sha256:[0-9a-f]{64})?$")

StoreKind = Literal["s3", "gs", "pvc"]
STORE_SCHEMES = ("s3", "gs", "pvc")  # pvc:// as KServe spells it; a bare name is a PVC too


@dataclass(frozen=True)
class ModelStore:
    """Where the pods read the repository: a bucket (Triton reads it natively) or a PVC."""

    kind: StoreKind
    uri: str  # s3://bucket/path, gs://bucket/path, or pvc://claim[/path]
    claim: str = ""  # the PVC name (pvc only)
    path: str = ""  # the folder inside the PVC that holds the model folders ("" = its root)

    @property
    def is_bucket(self) -> bool:
        return self.kind in ("s3", "gs")


def parse_model_store(text: str) -> ModelStore:
    """`s3://bucket[/path]`, `gs://bucket[/path]`, `pvc://claim[/path]` or a bare PVC name."""
    text = text.strip()
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if scheme not in STORE_SCHEMES:
            raise DeployError(
                f"--model-store {text}: unknown scheme '{scheme}://'; use s3://BUCKET/PATH, "
                "gs://BUCKET/PATH, pvc://CLAIM[/PATH] or the name of a PersistentVolumeClaim"
            )
        head, _, path = rest.partition("/")
        path = path.strip("/")
        if not head:
            raise DeployError(f"--model-store {text}: no {'claim' if scheme == 'pvc' else 'bucket'}"
                              " name after the scheme")
        if scheme == "pvc":
            _check_claim(head, text)
            uri = f"pvc://{head}/{path}" if path else f"pvc://{head}"
            return ModelStore("pvc", uri, claim=head, path=path)
        return ModelStore(scheme, f"{scheme}://{head}/{path}" if path else f"{scheme}://{head}")  # type: ignore[arg-type]
    _check_claim(text, text)
    return ModelStore("pvc", f"pvc://{text}", claim=text)


def _check_claim(name: str, given: str) -> None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise DeployError(
            f"--model-store {given}: not a bucket URI (s3://, gs://) nor a PersistentVolumeClaim "
            "name (lower-case letters, digits, '-' and '.')"
        )


def image_release(image: str) -> TritonRelease:
    """The Triton release an image runs, read from its tag ("…/tritonserver:24.10-py3").

    The registry and repository may be a mirror's; the tag must be a full NGC release tag whose
    onnxruntime version check-repo's table knows, else the opset checks would assume a runtime
    the pods do not have.
    """
    if not _IMAGE_REF.match(image):
        raise DeployError(f"--image {image!r} is not an image reference (REGISTRY/NAME:TAG)")
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    match = _TRITON_TAG.match(tag)
    known = ", ".join(f"{r.ngc}-py3 (onnxruntime {r.onnxruntime})"
                      for r in TRITON_RELEASES.values())
    if match is None:
        raise DeployError(
            f"--image {image}: tag {tag or '(none)'!r} is not a Triton release tag like "
            f"{TRITON_RELEASE.ngc}-py3; known releases: {known}"
        )
    release = TRITON_RELEASES.get(match["release"])
    if release is None:
        raise DeployError(
            f"--image {image}: Triton {match['release']} is not in check-repo's table of releases, "
            f"so its onnxruntime version is unknown; known releases: {known}"
        )
    return release


def _check_quantity(option: str, value: str | None) -> None:
    if value is not None and not _QUANTITY.match(value):
        raise DeployError(f"{option} {value!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi)")


def _check_image(option: str, value: str | None) -> None:
    if value is not None and not _IMAGE_REF.match(value):
        raise DeployError(f"{option} {value!r} is not an image reference (REGISTRY/NAME:TAG)")


@dataclass(frozen=True)
class KubernetesOptions:
    """Options of `attndeploy deploy kubernetes` (see its --help); validated on creation.

    `replicas` is the Deployment's starting count; the HorizontalPodAutoscaler keeps the count in
    [`min_replicas`, `max_replicas`]. Unset: `replicas` is `min_replicas` or 2, `min_replicas` is
    `replicas`, `max_replicas` the largest of 4 and the other two. `gpu` > 0 serves the
    onnxruntime flavour on that many `nvidia.com/gpu` per pod; 0 serves the python flavour.
    """

    name: str = DEFAULT_NAME
    namespace: str | None = None
    image: str = DEFAULT_IMAGE
    kserve: bool = False
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpu: int = 0
    model_store: str | None = None
    cpu: str = "1"
    memory: str = "2Gi"
    cpu_limit: str | None = None
    memory_limit: str | None = None
    target_cpu: int = 70
    models_image: str | None = None  # default: attndeploy-models:<digest of the served models>
    server_image: str | None = None  # python flavour; default: derived from `image`
    models: tuple[str, ...] = ()  # the model folders to serve; () = every one of the flavour

    def __post_init__(self) -> None:
        if len(self.name) > 63 or not _DNS_LABEL.match(self.name):
            raise DeployError(f"--name {self.name!r} must be a DNS label: at most 63 lower-case "
                              "letters, digits and '-', starting and ending with a letter or digit")
        if self.namespace is not None and (len(self.namespace) > 63
                                           or not _DNS_LABEL.match(self.namespace)):
            raise DeployError(f"--namespace {self.namespace!r} must be a DNS label (lower-case "
                              "letters, digits and '-', at most 63)")
        image_release(self.image)
        for option, value in (("--replicas", self.replicas), ("--min-replicas", self.min_replicas),
                              ("--max-replicas", self.max_replicas)):
            if value is not None and value < 1:
                raise DeployError(f"{option} must be at least 1, got {value}")
        if self.gpu < 0:
            raise DeployError(f"--gpu must be 0 (CPU) or more, got {self.gpu}")
        if not 1 <= self.target_cpu <= 100:
            raise DeployError(
                f"--target-cpu must be a percentage in [1, 100], got {self.target_cpu}")
        low, start, high = self.replica_range
        if low > high:
            given = "--min-replicas" if self.min_replicas is not None else "--replicas"
            raise DeployError(f"{given} {low} is above --max-replicas {high}")
        if not low <= start <= high:
            raise DeployError(f"--replicas {start} is outside [--min-replicas {low}, "
                              f"--max-replicas {high}]")
        for option, value in (("--cpu", self.cpu), ("--memory", self.memory),
                              ("--cpu-limit", self.cpu_limit),
                              ("--memory-limit", self.memory_limit)):
            _check_quantity(option, value)
        _check_image("--models-image", self.models_image)
        _check_image("--server-image", self.server_image)
        if self.server_image is not None and self.gpu > 0:
            raise DeployError("--server-image is the python flavour's image (CPU); with --gpu the "
                              "onnxruntime flavour runs in --image itself")
        store = self.store  # parses, so a bad URI fails here
        if self.kserve and store is None:
            raise DeployError(
                "--kserve needs --model-store (s3://, gs:// or a PVC): KServe's storage "
                "initializer downloads the repository from it into the pod"
            )
        if self.kserve and self.models_image is not None:
            raise DeployError("--models-image ships a local repository in the plain manifests; "
                              "with --kserve the repository comes from --model-store")
        if store is not None and self.models_image is not None:
            raise DeployError("--models-image and --model-store are two ways to ship the "
                              "repository; give one")

    @property
    def replica_range(self) -> tuple[int, int, int]:
        """(min, starting, max) replicas with the defaults filled in."""
        start = self.replicas if self.replicas is not None else (
            self.min_replicas if self.min_replicas is not None else DEFAULT_REPLICAS)
        low = self.min_replicas if self.min_replicas is not None else start
        high = self.max_replicas if self.max_replicas is not None else max(
            DEFAULT_MAX_REPLICAS, low, start)
        return low, start, high

    @property
    def store(self) -> ModelStore | None:
        return parse_model_store(self.model_store) if self.model_store is not None else None

    @property
    def release(self) -> TritonRelease:
        return image_release(self.image)

    @property
    def flavor(self) -> str:
        """The repository flavour the pods serve: onnxruntime on GPUs, python on CPUs."""
        return "onnxruntime" if self.gpu > 0 else "python"

    def python_server_image(self) -> str:
        """The image that runs the python flavour: `image` plus onnxruntime for model.py."""
        if self.server_image is not None:
            return self.server_image
        release = self.release
        return f"attndeploy-tritonserver:{release.ngc}-py3-onnxruntime{release.onnxruntime}"

    def serving_image(self) -> str:
        return self.image if self.gpu > 0 else self.python_server_image()
