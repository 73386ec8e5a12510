"""What `attndeploy deploy kubernetes` is asked for, checked before anything is written.

`KubernetesOptions` is frozen and validated in `__post_init__`: every bad value is one
`DeployError` that names the option and what to do. Two values are parsed into small records:
the server image into the Triton release it runs (`image_release`, from check-repo's table, so
the manifests and the offline checks agree on the onnxruntime version), and `--model-store` into
a `ModelStore` (`parse_model_store`).

Every value that reaches the manifests or the README's shell commands is checked against the
rules of what it names: names and namespaces are DNS labels, claims DNS subdomains, buckets S3's or
GCS's bucket names, paths inside a bucket or claim plain relative paths of a few safe characters,
replica counts at most `MAX_REPLICAS` (a practical bound, see there), GPU counts Kubernetes'
int32. The README quotes every value anyway (`kubernetes.instructions`); the checks keep values
that no cluster would accept, or that mean something to a shell, from being written at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from attndeploy.errors import DeployError
from attndeploy.serving.packaging.triton_releases import (
    TRITON_RELEASE,
    TRITON_RELEASES,
    TritonRelease,
)

NGC_IMAGE = "nvcr.io/nvidia/tritonserver"
DEFAULT_IMAGE = f"{NGC_IMAGE}:{TRITON_RELEASE.ngc}-py3"
DEFAULT_NAME = "attndeploy-triton"
DEFAULT_OUT = "deploy"  # the folder `attndeploy deploy kubernetes` writes
TARGETS = ("kubernetes",)  # where `attndeploy deploy` deploys
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

# Kubernetes counts are int32: the API server refuses more (the bound of --gpu).
INT32_MAX = 2**31 - 1
# The most replicas --replicas, --min-replicas and --max-replicas take (the HPA's maxReplicas, the
# Deployment's replicas). Kubernetes takes up to INT32_MAX, but no cluster runs that: its tested
# limits are 5,000 nodes and 150,000 pods, 110 pods a node. 1,000 tritonserver pods, each loading
# every served model and asking for its CPU and memory, is already hundreds of nodes for one model
# repository, more than autoscaled inference services run behind one Service; beyond it a typo (a
# few extra zeros) is likelier than a plan, and an autoscaler that may grow to it can take the
# cluster, or the cloud bill, under a load spike or a CPU-bound bug. A fleet that size is better
# split (several Deployments, clusters or zones). Raise this constant if you really run more.
MAX_REPLICAS = 1000

# Python packages a served model may need in the server beyond onnxruntime, with the release
# series the python flavour's image installs (`pip install "NAME~=SERIES.0"`): `tokenizers` for a
# text model of a converted Hugging Face model (WordPiece, `attndeploy.runtime.wordpiece`), the
# series the floor of pyproject's `hf` extra, the one the runtime is tested with; `pillow` for an
# image model's `NAME_image` (it decodes the PNG or JPEG bytes), the series tested here.
SERVER_PACKAGES: dict[str, str] = {"tokenizers": "0.23", "pillow": "13"}

StoreKind = Literal["s3", "gs", "pvc"]
STORE_SCHEMES = ("s3", "gs", "pvc")  # pvc:// as KServe spells it; a bare name is a PVC too

# The folder inside a PVC: relative, segments of letters, digits, '.', '_' and '-' (not '.' nor
# '..'), each at most 255 bytes (a file name). It becomes the volume's subPath and a path in the
# README's `kubectl exec`/`kubectl cp` commands.
_PVC_SEGMENT = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_PVC_PATH_RULE = "a relative path of folders named with letters, digits, '.', '_' and '-'"
# The prefix inside a bucket: the same, plus '+', '=', '@' and ',' (characters of object keys
# that mean nothing to a shell nor to Triton's bucket URLs). Not allowed: spaces, quotes, ';',
# '$', '`', '*', '?', ':', '%', '#', '!', brackets, backslashes, control characters.
_BUCKET_SEGMENT = re.compile(r"^[A-Za-z0-9._+=@,-]{1,255}$")
_BUCKET_PATH_RULE = ("a relative path of folders named with letters, digits and "
                     "'.', '_', '-', '+', '=', '@', ','")
# S3 bucket names (AWS "General purpose bucket naming rules"): 3-63 lower-case letters, digits,
# '.' and '-', starting and ending with a letter or digit, no '..', not an IPv4 address.
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# GCS bucket names (Cloud Storage "Bucket naming"): lower-case letters, digits, '-', '_' and '.',
# starting and ending with a letter or digit; 3-63 characters, or up to 222 with dots, each
# dot-separated part at most 63; not an IPv4 address.
_GCS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


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
    """`s3://bucket[/path]`, `gs://bucket[/path]`, `pvc://claim[/path]` or a bare PVC name.

    DeployError, naming `--model-store`, unless the bucket or claim name follows its rules and
    the path is a plain relative path of safe characters (see `_PVC_PATH_RULE` and
    `_BUCKET_PATH_RULE`); a trailing '/' is dropped.
    """
    text = text.strip()
    given = repr(text)  # the message stays one line whatever the value holds
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if scheme not in STORE_SCHEMES:
            raise DeployError(
                f"--model-store {given}: unknown scheme {scheme + '://'!r}; use s3://BUCKET/PATH, "
                "gs://BUCKET/PATH, pvc://CLAIM[/PATH] or the name of a PersistentVolumeClaim"
            )
        head, _, path = rest.partition("/")
        path = path.rstrip("/")
        if not head:
            what = "claim" if scheme == "pvc" else "bucket"
            raise DeployError(f"--model-store {given}: no {what} name after the scheme")
        if scheme == "pvc":
            _check_claim(head, given)
            _check_path(path, given, _PVC_SEGMENT, _PVC_PATH_RULE, "the claim")
            uri = f"pvc://{head}/{path}" if path else f"pvc://{head}"
            return ModelStore("pvc", uri, claim=head, path=path)
        _check_bucket(scheme, head, given)
        _check_path(path, given, _BUCKET_SEGMENT, _BUCKET_PATH_RULE, "the bucket")
        return ModelStore(scheme, f"{scheme}://{head}/{path}" if path else f"{scheme}://{head}")  # type: ignore[arg-type]
    _check_claim(text, given)
    return ModelStore("pvc", f"pvc://{text}", claim=text)


def _check_claim(name: str, given: str) -> None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise DeployError(
            f"--model-store {given}: not a bucket URI (s3://, gs://) nor a PersistentVolumeClaim "
            "name (lower-case letters, digits, '-' and '.')"
        )


def _check_bucket(scheme: str, bucket: str, given: str) -> None:
    if scheme == "s3":
        valid = bool(_S3_BUCKET.match(bucket)) and ".." not in bucket
        rule = "3 to 63 lower-case letters, digits, '.' and '-'"
    else:
        parts = bucket.split(".")
        valid = (bool(_GCS_BUCKET.match(bucket)) and ".." not in bucket
                 and len(bucket) <= (222 if len(parts) > 1 else 63)
                 and all(len(part) <= 63 for part in parts))
        rule = "3 to 63 lower-case letters, digits, '.', '_' and '-' (up to 222 with dots)"
    if not valid or _IPV4.match(bucket):
        raise DeployError(f"--model-store {given}: {bucket!r} is not a {scheme}:// bucket name "
                          f"({rule}, starting and ending with a letter or digit)")


def _check_path(path: str, given: str, segment: re.Pattern[str], rule: str, inside: str) -> None:
    """`path` ("" = none) is relative, without empty, '.' or '..' folders, of safe characters."""
    if not path:
        return
    for part in path.split("/"):
        if part in ("", ".", "..") or not segment.match(part):
            raise DeployError(f"--model-store {given}: the path inside {inside} must be {rule} "
                              "(no '.' or '..', no empty or absolute path)")


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
            if value is not None and value > MAX_REPLICAS:
                raise DeployError(f"{option} must be at most {MAX_REPLICAS} (a practical bound "
                                  f"on pods of one Deployment), got {value}")
        if not 0 <= self.gpu <= INT32_MAX:
            raise DeployError(f"--gpu must be 0 (CPU) to {INT32_MAX} GPUs per pod, got {self.gpu}")
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

    def python_server_image(self, packages: Iterable[str] = ()) -> str:
        """The image that runs the python flavour: `server_image`, or `image` plus onnxruntime for
        model.py and the `packages` (keys of `SERVER_PACKAGES`) the served models need, tagged
        with what it holds (a node that has an image of that tag never pulls it again)."""
        if self.server_image is not None:
            return self.server_image
        release = self.release
        extras = "".join(f"-{name}{SERVER_PACKAGES[name]}" for name in sorted(set(packages)))
        return (f"attndeploy-tritonserver:{release.ngc}-py3-onnxruntime{release.onnxruntime}"
                f"{extras}")

    def serving_image(self, packages: Iterable[str] = ()) -> str:
        """The server container's image: `image` with GPUs, else the python flavour's image."""
        return self.image if self.gpu > 0 else self.python_server_image(packages)
