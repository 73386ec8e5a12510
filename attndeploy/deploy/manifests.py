"""Kubernetes objects as plain dicts, one builder per object, from one `Plan`.

The tritonserver command line is `triton_arguments`: the flags `attndeploy serve` passes to the
local server, with the addresses opened to the pod network and the repository path of the pod.
What stays local only: the python backend's shared-memory prefix and `--backend-directory` (the
wheel's layout; the NGC image has its own backends), which `serve` needs to clean up after a
killed server and to find the wheel's backend.

Security, as for `attndeploy serve`: tritonserver has no authentication and serving a repository
runs its `model.py` files, so the server runs with `--model-control-mode=none` (the repository
API cannot load, unload or replace a model) on a repository that holds only the models to serve.
Its admin APIs (shared-memory registration, the repository API, trace and log settings; see
`attndeploy.serving.server.restricted`) are closed to clients on gRPC and HTTP: they answer only
requests with the header `attndeploy-admin-key` holding a key the container draws at each start
from the kernel's random source (`START_SCRIPT`, the container's command, which then execs
tritonserver with it). The key is in no object the API server holds (not the pod spec, not an env
var from a pod field: a pod's UID, the key of earlier versions, is shown to anyone who may read
pods), is never printed, and lives only in tritonserver's command line inside the container:
whoever may `kubectl exec` into the pod can read it there, and could do anything in the pod
anyway. Nothing in the pod needs it (the probes read the open health endpoints). Health,
metadata, model config, inference and statistics stay open. The pods also get no service-account
token (the server never talks to the Kubernetes API), run as the image's non-root user (uid 1000,
`triton-server` in the NGC images) without privilege escalation or capabilities, and the Service
is ClusterIP (reachable inside the cluster only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attndeploy.deploy.options import KubernetesOptions, ModelStore
from attndeploy.errors import DeployError
from attndeploy.serving.server.restricted import restricted_api_arguments

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002  # as `attndeploy serve` and tritonserver
READY_PATH, LIVE_PATH, METRICS_PATH = "/v2/health/ready", "/v2/health/live", "/metrics"
MODELS_MOUNT = "/models"  # where the pod's tritonserver reads the repository
COPY_MOUNT = "/mnt/models"  # where the initContainer writes it (the same emptyDir)
MODELS_IMAGE_ROOT = "/models"  # where models.Dockerfile puts the model folders
SERVER_USER = 1000  # `triton-server` in the NGC tritonserver images
GRACE_S = 30  # terminationGracePeriodSeconds
PRE_STOP_S = 5  # endpoints drop the pod before the server stops taking requests
EXIT_TIMEOUT_S = GRACE_S - PRE_STOP_S - 5  # in-flight requests drain within the grace period
SHM_SIZE = "256Mi"  # the python backend passes tensors through /dev/shm (64 MiB in a container)

# KServe's Triton runtime (ClusterServingRuntime `kserve-tritonserver`) and its ports: it runs
# `tritonserver --model-store=/mnt/models --grpc-port=9000 --http-port=8080 ...` and appends an
# InferenceService's args to its own (kserve pkg/controller/.../utils.go MergeRuntimeContainers).
KSERVE_RUNTIME = "kserve-tritonserver"
KSERVE_HTTP_PORT = 8080
# The flags KServe's runtime sets itself (or leaves at tritonserver's defaults, which are the
# values here): an InferenceService's args are every other flag of `triton_arguments`.
KSERVE_RUNTIME_FLAGS = ("--model-repository", "--grpc-address", "--grpc-port", "--http-address",
                        "--http-port", "--metrics-address", "--metrics-port")

# The server container's command: a POSIX shell step that draws the key of the restricted admin
# APIs (256 bits from /dev/urandom, as 64 hex digits), refuses to start without one, and execs its
# arguments (tritonserver's flags, or KServe's runtime args, which start with `tritonserver`) with
# the two restricting flags added. The key is an unexported shell variable: not in the env that
# tritonserver inherits, not in any log. Backticks rather than `$(...)`: the kubelet expands
# `$(NAME)` in a container's command and args.
START_NAME = "attndeploy-start"  # the script's $0, the name its error message gives
KEY_VAR = "key"  # the shell variable that holds the key
KEY_HEX_DIGITS = 64  # 32 bytes
START_SCRIPT = "\n".join([
    "# attndeploy: Triton's admin APIs answer only this key: drawn here at each start, held only",
    "# by tritonserver's command line, never printed.",
    f"{KEY_VAR}=`od -An -tx1 -N{KEY_HEX_DIGITS // 2} /dev/urandom | tr -d ' \\n'`",
    f"case ${KEY_VAR} in *[!0-9a-f]*) {KEY_VAR}= ;; esac",
    f"if [ ${{#{KEY_VAR}}} -ne {KEY_HEX_DIGITS} ]; then",
    f"  echo \"{START_NAME}: no key drawn from /dev/urandom; not starting tritonserver\" >&2",
    "  exit 1",
    "fi",
    "case $1 in ''|-*) set -- tritonserver \"$@\" ;; esac",
    " \\\n  ".join(['exec "$@"', *(f'"{arg}"' for arg in
                                  restricted_api_arguments(f"${KEY_VAR}"))]),
]) + "\n"


@dataclass(frozen=True)
class Plan:
    """What the manifests describe: the options, the models served and how the repo is shipped."""

    options: KubernetesOptions
    models: tuple[str, ...]  # the model folders the pods serve (all of one flavour)
    models_image: str | None  # the image carrying a local repository (None: a store)
    # Python packages the served models need in the server beyond onnxruntime (keys of
    # `options.SERVER_PACKAGES`; a WordPiece text model needs `tokenizers`)
    server_packages: tuple[str, ...] = ()

    @property
    def store(self) -> ModelStore | None:
        return self.options.store

    @property
    def serving_image(self) -> str:
        """The server container's image (the python flavour's holds `server_packages`)."""
        return self.options.serving_image(self.server_packages)


def triton_arguments(
    repository: str,
    *,
    host: str = "0.0.0.0",
    http_port: int = HTTP_PORT,
    grpc_port: int = GRPC_PORT,
    metrics_port: int = METRICS_PORT,
    gpu_metrics: bool = False,
    exit_timeout_s: int = EXIT_TIMEOUT_S,
) -> list[str]:
    """tritonserver's flags, as `attndeploy serve` sets them, for a server in a pod.

    All but the two that restrict the admin APIs: those hold the key, which `START_SCRIPT` (the
    container's command, `start_command`) draws at start and adds.
    """
    return [
        f"--model-repository={repository}",
        "--model-control-mode=none",  # no client can load, unload or replace a model
        f"--grpc-address={host}",
        f"--grpc-port={grpc_port}",
        f"--http-address={host}",
        f"--http-port={http_port}",
        f"--metrics-address={host}",
        f"--metrics-port={metrics_port}",
        f"--allow-gpu-metrics={'true' if gpu_metrics else 'false'}",
        "--strict-readiness=true",  # ready = server ready and every model ready
        # A model that fails to load keeps the pod up and not ready (the rollout stops, the old
        # pods keep serving) and its reason readable from the log and the repository index.
        "--exit-on-error=false",
        f"--exit-timeout-secs={exit_timeout_s}",
    ]


def start_command() -> list[str]:
    """The server container's command: `START_SCRIPT` run by /bin/sh, its `$@` the container's
    args. It ends in `exec`, so tritonserver is the container's process 1 and gets SIGTERM."""
    return ["/bin/sh", "-c", START_SCRIPT, START_NAME]


def kserve_arguments(*, gpu_metrics: bool) -> list[str]:
    """The args of an InferenceService: `triton_arguments` less the runtime's own flags."""
    return [arg for arg in triton_arguments(MODELS_MOUNT, gpu_metrics=gpu_metrics)
            if arg.split("=", 1)[0] not in KSERVE_RUNTIME_FLAGS]


def _labels(options: KubernetesOptions) -> dict[str, str]:
    return {**_selector(options), "app.kubernetes.io/component": "inference-server",
            "app.kubernetes.io/managed-by": "attndeploy"}


def _selector(options: KubernetesOptions) -> dict[str, str]:
    return {"app.kubernetes.io/name": "attndeploy-triton",
            "app.kubernetes.io/instance": options.name}


def _metadata(options: KubernetesOptions, name: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or options.name}
    if options.namespace is not None:
        meta["namespace"] = options.namespace
    meta["labels"] = _labels(options)
    meta.update(extra)
    return meta


def _scrape_annotations() -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
            "prometheus.io/path": METRICS_PATH}


def _resources(options: KubernetesOptions) -> dict[str, Any]:
    """Requests as given; memory limited (to the request unless told): a python backend that
    grows must be OOM-killed and restarted, not take the node. No CPU limit unless asked: the
    HorizontalPodAutoscaler scales on CPU use, and a limit would throttle instead."""
    limits: dict[str, Any] = {"memory": options.memory_limit or options.memory}
    if options.cpu_limit is not None:
        limits["cpu"] = options.cpu_limit
    if options.gpu > 0:
        limits["nvidia.com/gpu"] = options.gpu
    return {"requests": {"cpu": options.cpu, "memory": options.memory}, "limits": limits}


def _container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _probe(path: str, *, period_s: int, failures: int, port: int | str = "http") -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s,
            "timeoutSeconds": 2, "failureThreshold": failures}


def server_container(plan: Plan) -> dict[str, Any]:
    """The tritonserver container: the serve flags, three named ports, the health probes."""
    options, store = plan.options, plan.store
    repository = store.uri if store is not None and store.is_bucket else MODELS_MOUNT
    container: dict[str, Any] = {
        "name": "tritonserver",
        "image": plan.serving_image,
        "imagePullPolicy": "IfNotPresent",
        "command": start_command(),  # draws the admin key, then execs tritonserver
        "args": triton_arguments(repository, gpu_metrics=options.gpu > 0),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        # With --model-control-mode=none the endpoints open only once every model has loaded:
        # liveness waits for this (up to 5 minutes) instead of killing a loading server.
        "startupProbe": _probe(LIVE_PATH, period_s=5, failures=60),
        "readinessProbe": _probe(READY_PATH, period_s=5, failures=3),
        "livenessProbe": _probe(LIVE_PATH, period_s=10, failures=3),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRE_STOP_S)]}}},
        "resources": _resources(options),
        "securityContext": _container_security(),
    }
    if store is not None and store.is_bucket:
        # Triton reads s3:// and gs:// itself; credentials come from this Secret when it exists
        # (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, or for GCS
        # GOOGLE_APPLICATION_CREDENTIALS), else from the node's or the workload's identity.
        container["envFrom"] = [{"secretRef": {"name": f"{options.name}-store", "optional": True}}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if store is None or not store.is_bucket:
        models_mount: dict[str, Any] = {"name": "models", "mountPath": MODELS_MOUNT,
                                        "readOnly": True}
        if store is not None and store.path:
            models_mount["subPath"] = store.path
        mounts.insert(0, models_mount)
    container["volumeMounts"] = mounts
    return container


def copy_models_container(plan: Plan) -> dict[str, Any]:
    """The initContainer that copies the models image's folders into the pod's emptyDir."""
    return {
        "name": "copy-models",
        "image": plan.models_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["cp", "-R", f"{MODELS_IMAGE_ROOT}/.", f"{COPY_MOUNT}/"],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                      "limits": {"memory": "256Mi"}},
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "models", "mountPath": COPY_MOUNT}],
    }


def _volumes(plan: Plan) -> list[dict[str, Any]]:
    store = plan.store
    volumes: list[dict[str, Any]] = []
    if store is None:
        volumes.append({"name": "models", "emptyDir": {}})
    elif store.kind == "pvc":
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": store.claim,
                                                                   "readOnly": True}})
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}})
    return volumes


def _pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": SERVER_USER, "runAsGroup": SERVER_USER,
            "fsGroup": SERVER_USER, "seccompProfile": {"type": "RuntimeDefault"}}


def deployment(plan: Plan) -> dict[str, Any]:
    options = plan.options
    _, start, _ = options.replica_range
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_S,
        "securityContext": _pod_security(),
    }
    if plan.store is None:
        pod["initContainers"] = [copy_models_container(plan)]
    pod["containers"] = [server_container(plan)]
    pod["volumes"] = _volumes(plan)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(options),
        "spec": {
            "replicas": start,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": _selector(options)},
            # keep the serving capacity during a rollout: a new pod replaces an old one only
            # once it is ready (every model loaded)
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": _labels(options), "annotations": _scrape_annotations()},
                "spec": pod,
            },
        },
    }


def service(plan: Plan) -> dict[str, Any]:
    options = plan.options
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(options, annotations=_scrape_annotations()),
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(options),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP",
                 "appProtocol": "http"},
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                 "appProtocol": "kubernetes.io/h2c"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics",
                 "protocol": "TCP", "appProtocol": "http"},
            ],
        },
    }


def autoscaler(plan: Plan) -> dict[str, Any]:
    options = plan.options
    low, _, high = options.replica_range
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(options),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": options.name},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": options.target_cpu},
            }}],
            # scale down one pod a minute after 5 minutes of low use: a new pod costs a model load
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300, "policies": [
                {"type": "Pods", "value": 1, "periodSeconds": 60}]}},
        },
    }


def disruption_budget(plan: Plan) -> dict[str, Any]:
    """At most one pod down for a voluntary disruption (a node drain). maxUnavailable rather than
    minAvailable: with one replica, minAvailable 1 would block every drain."""
    options = plan.options
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(options),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector(options)}},
    }


def pvc_loader_pod(plan: Plan) -> dict[str, Any]:
    """A pod that mounts the PVC writable, for `kubectl cp` of the model folders into it."""
    options, store = plan.options, plan.store
    if store is None or store.kind != "pvc":
        raise DeployError("a PVC loader pod is only for --model-store with a PVC")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(options, name=f"{options.name}-pvc-loader"),
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "securityContext": _pod_security(),
            "containers": [{
                "name": "loader",
                "image": "busybox:1.36",
                "command": ["sleep", "3600"],
                "securityContext": _container_security(),
                "volumeMounts": [{"name": "models", "mountPath": MODELS_MOUNT}],
            }],
            "volumes": [{"name": "models",
                         "persistentVolumeClaim": {"claimName": store.claim}}],
        },
    }


def inference_service(plan: Plan) -> dict[str, Any]:
    """A KServe InferenceService on KServe's Triton runtime, in raw-deployment mode (a Deployment,
    a Service and an HPA made by KServe; no Knative needed, gRPC and metrics ports kept)."""
    options, store = plan.options, plan.store
    if store is None:  # KubernetesOptions refuses --kserve without a store
        raise DeployError("--kserve needs --model-store")
    model: dict[str, Any] = {
        "modelFormat": {"name": "triton"},
        "runtime": KSERVE_RUNTIME,
        "protocolVersion": "v2",
        "storageUri": store.uri,
        # the runtime's image tag is the cluster's choice: pin the release check-repo assumes
        "image": plan.serving_image,
        # appended to the runtime's own flags (repository, ports): the plain manifests' flags
        # less those, so the same guarantees (no model control, readiness covers every model,
        # the admin APIs restricted to a key drawn at start, which the command adds). The
        # command replaces the runtime's (none: the image's entrypoint); the runtime's args,
        # `tritonserver --model-store=...`, then these, are the script's `$@`.
        "command": start_command(),
        "args": kserve_arguments(gpu_metrics=options.gpu > 0),
        "startupProbe": _probe(LIVE_PATH, period_s=5, failures=60, port=KSERVE_HTTP_PORT),
        "readinessProbe": _probe(READY_PATH, period_s=5, failures=3, port=KSERVE_HTTP_PORT),
        "livenessProbe": _probe(LIVE_PATH, period_s=10, failures=3, port=KSERVE_HTTP_PORT),
        "resources": _resources(options),
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    low, _, high = options.replica_range
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": _metadata(options, annotations={
            "serving.kserve.io/deploymentMode": "RawDeployment",
            "serving.kserve.io/autoscalerClass": "hpa",
            "serving.kserve.io/enable-prometheus-scraping": "true",
        }),
        "spec": {"predictor": {
            "minReplicas": low,
            "maxReplicas": high,
            "scaleMetric": "cpu",
            "scaleTarget": options.target_cpu,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": GRACE_S,
            "model": model,
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                      "sizeLimit": SHM_SIZE}}],
        }},
    }
