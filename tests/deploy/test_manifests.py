"""`deploy_kubernetes` without a cluster: strict schemas, golden files, the release table, and
everything it refuses before writing."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import onnx
import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.deploy import KubernetesOptions, deploy_kubernetes, parse_model_store
from attndeploy.deploy.options import DEFAULT_IMAGE, image_release
from attndeploy.errors import DeployError, OutputError, RepositoryError
from attndeploy.serving.packaging import triton_releases

from .golden_cases import (
    CASES,
    GOLDEN_DIR,
    ONNXRUNTIME_MODEL,
    PYTHON_MODEL,
    build_sample_repository,
    comparable,
    compared_files,
    generate,
)
from .k8s_schema import SchemaError, validate, validate_k8s, validate_kserve


@pytest.fixture(scope="module")
def sample_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sample_repository(tmp_path_factory.mktemp("sample"))


@pytest.fixture(scope="module")
def generated(sample_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("generated")
    return {case: generate(case, sample_repo, root / case) for case in CASES}


def documents(folder: Path) -> list[dict]:
    return [doc for path in sorted(folder.rglob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())]


def kinds(folder: Path) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in documents(folder)}


# --------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_manifest_validates_strictly(case: str, generated: dict[str, Path]) -> None:
    docs = documents(generated[case])
    assert docs
    for doc in docs:
        validate(doc)  # Kubernetes 1.30 strict, or the KServe 0.14.1 InferenceService schema


def test_the_plain_set_is_a_deployment_service_autoscaler_and_budget(
    generated: dict[str, Path],
) -> None:
    folder = generated["plain-cpu-local"]
    top = sorted(p.name for p in folder.glob("*.yaml"))  # what `kubectl apply -f OUT` reads
    assert top == ["deployment.yaml", "hpa.yaml", "pdb.yaml", "service.yaml"]
    objects = kinds(folder)
    assert objects["HorizontalPodAutoscaler"]["apiVersion"] == "autoscaling/v2"
    assert objects["PodDisruptionBudget"]["apiVersion"] == "policy/v1"
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in objects["Service"]["spec"]["ports"]}
    assert ports == {"http": (8000, "http"), "grpc": (8001, "grpc"),
                     "metrics": (8002, "metrics")}


def test_the_strict_check_catches_an_unknown_field(generated: dict[str, Path]) -> None:
    deployment = kinds(generated["plain-cpu-local"])["Deployment"]
    validate_k8s(deployment)
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(SchemaError, match="readinesProbe"):
        validate_k8s(typo)
    service = kinds(generated["kserve-cpu-pvc"])["InferenceService"]
    validate_kserve(service)
    typo = copy.deepcopy(service)
    typo["spec"]["predictor"]["model"]["storageURI"] = "s3://x"
    with pytest.raises(SchemaError, match="storageURI"):
        validate_kserve(typo)
    typo = copy.deepcopy(service)
    typo["spec"]["predictor"]["model"]["readinessProbe"]["httpGet"]["paht"] = "/"
    with pytest.raises(SchemaError, match="paht"):  # inside a Kubernetes type, too
        validate_kserve(typo)


# --------------------------------------------------------------------------- golden files


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_manifests_equal_their_golden_files(case: str, generated: dict[str, Path]) -> None:
    golden = GOLDEN_DIR / case
    assert compared_files(generated[case]) == compared_files(golden), (
        f"files differ from {golden}; if intended, run `python -m tests.deploy.golden_cases`")
    for relative in compared_files(golden):
        assert comparable(generated[case] / relative) == comparable(golden / relative), (
            f"{case}/{relative} differs; if intended, run `python -m tests.deploy.golden_cases`")


def test_every_golden_folder_has_a_case() -> None:
    folders = {p.name for p in GOLDEN_DIR.iterdir() if p.is_dir()}
    assert folders == set(CASES)


# --------------------------------------------------------------------------- what is served


def test_cpu_pods_serve_only_the_python_flavour_with_no_model_control(
    generated: dict[str, Path],
) -> None:
    folder = generated["plain-cpu-local"]
    container = kinds(folder)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert "--model-control-mode=none" in container["args"]
    assert "--model-repository=/models" in container["args"]
    copies = [line.split() for line in comparable(folder / "images" / "models.Dockerfile")
              if line.startswith("COPY")]
    assert copies == [["COPY", PYTHON_MODEL, f"/models/{PYTHON_MODEL}"]]


def test_gpu_pods_serve_the_onnxruntime_flavour_from_the_store(
    generated: dict[str, Path], sample_repo: Path,
) -> None:
    spec = kinds(generated["plain-gpu-s3"])["Deployment"]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"] == DEFAULT_IMAGE  # the NGC image itself
    assert "--model-repository=s3://models-bucket/triton" in container["args"]
    assert "--allow-gpu-metrics=true" in container["args"]
    assert "initContainers" not in spec
    readme = (generated["plain-gpu-s3"] / "README.md").read_text()
    assert f"aws s3 sync --delete {sample_repo / ONNXRUNTIME_MODEL} " in readme
    assert PYTHON_MODEL not in readme


def test_kserve_appends_no_model_control_to_the_runtime_flags(
    generated: dict[str, Path],
) -> None:
    model = kinds(generated["kserve-gpu-gs"])["InferenceService"]["spec"]["predictor"]["model"]
    assert model["storageUri"] == "gs://models/triton"
    assert model["runtime"] == "kserve-tritonserver"
    assert "--model-control-mode=none" in model["args"]
    assert model["resources"]["limits"]["nvidia.com/gpu"] == 2


def test_the_readme_gives_the_commands_that_apply_the_folder(
    generated: dict[str, Path],
) -> None:
    folder = generated["plain-cpu-local"]
    readme = (folder / "README.md").read_text()
    assert f"kubectl apply -f {folder}" in readme
    assert "kubectl rollout status deployment/attndeploy-triton" in readme
    assert "docker build -t registry.example.com/ml/attndeploy-models:v1 -f " in readme
    assert "--model-control-mode=none" in readme


def test_the_models_image_tag_follows_the_served_models(
    sample_repo: Path, tmp_path: Path,
) -> None:
    first = deploy_kubernetes(sample_repo, tmp_path / "a", KubernetesOptions())
    again = deploy_kubernetes(sample_repo, tmp_path / "b", KubernetesOptions())
    (models_image,) = [i for i in first.images_to_build if i.startswith("attndeploy-models:")]
    assert models_image in again.images_to_build  # the same models, the same tag
    labels = sample_repo / PYTHON_MODEL / "labels.txt"
    original = labels.read_text()
    try:
        labels.write_text(original.replace("label_0", "first"))
        changed = deploy_kubernetes(sample_repo, tmp_path / "c", KubernetesOptions())
    finally:
        labels.write_text(original)
    assert models_image not in changed.images_to_build


# --------------------------------------------------------------------------- the release table


def test_the_default_image_runs_the_release_check_repo_assumes(
    generated: dict[str, Path],
) -> None:
    release = image_release(DEFAULT_IMAGE)
    assert release == triton_releases.TRITON_RELEASE
    assert triton_releases.TRITON_ORT_MAX_OPSET == release.max_opset
    assert DEFAULT_IMAGE == f"nvcr.io/nvidia/tritonserver:{release.ngc}-py3"
    # the python flavour's image installs the onnxruntime that Triton's backend bundles
    lines = comparable(generated["plain-cpu-local"] / "images" / "server.Dockerfile")
    assert lines == [f"FROM {DEFAULT_IMAGE}",
                     'RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir '
                     f'"onnxruntime~={release.onnxruntime}.0"']


@pytest.mark.parametrize("image", [
    "nvcr.io/nvidia/tritonserver:24.11-py3",  # a release the table does not know
    "nvcr.io/nvidia/tritonserver:24.10-pyt-python-py3",  # no onnxruntime backend
    "nvcr.io/nvidia/tritonserver",  # no tag
    "nvcr.io/nvidia/tritonserver:latest",
])
def test_an_image_whose_onnxruntime_is_unknown_is_refused(image: str) -> None:
    with pytest.raises(DeployError, match="--image"):
        KubernetesOptions(image=image)


@pytest.mark.parametrize("release", sorted(triton_releases.TRITON_RELEASES))
def test_a_mirrored_image_of_a_known_release_is_accepted(release: str) -> None:
    image = f"registry.example.com:5000/mirror/tritonserver:{release}-py3"
    options = KubernetesOptions(image=image, gpu=1)
    assert options.release == triton_releases.TRITON_RELEASES[release]
    assert options.serving_image() == image


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(("text", "kind", "uri", "claim", "path"), [
    ("s3://bucket/models/", "s3", "s3://bucket/models", "", ""),
    ("gs://bucket", "gs", "gs://bucket", "", ""),
    ("pvc://claim/a/b", "pvc", "pvc://claim/a/b", "claim", "a/b"),
    ("models-claim", "pvc", "pvc://models-claim", "models-claim", ""),
])
def test_a_model_store_is_a_bucket_or_a_claim(
    text: str, kind: str, uri: str, claim: str, path: str,
) -> None:
    store = parse_model_store(text)
    assert (store.kind, store.uri, store.claim, store.path) == (kind, uri, claim, path)


@pytest.mark.parametrize(("text", "message"), [
    ("ftp://host/models", "unknown scheme 'ftp://'"),
    ("as://account/container", "unknown scheme 'as://'"),
    ("s3://", "no bucket name"),
    ("/data/models", "not a bucket URI"),
    ("Models_Claim", "not a bucket URI"),
])
def test_a_bad_model_store_is_refused(text: str, message: str) -> None:
    with pytest.raises(DeployError, match=message):
        parse_model_store(text)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"min_replicas": 5, "max_replicas": 3}, "--min-replicas 5 is above --max-replicas 3"),
    ({"replicas": 9, "max_replicas": 4}, "--replicas 9 is above --max-replicas 4"),
    ({"replicas": 1, "min_replicas": 2}, r"--replicas 1 is outside \[--min-replicas 2, "),
    ({"replicas": 0}, "--replicas must be at least 1"),
    ({"gpu": -1}, "--gpu"),
    ({"kserve": True}, "--kserve needs --model-store"),
    ({"model_store": "s3://bucket", "models_image": "m:1"}, "give one"),
    ({"name": "Triton_Server"}, "--name"),
    ({"namespace": "ML"}, "--namespace"),
    ({"memory": "2GB"}, "--memory '2GB' is not a Kubernetes quantity"),
    ({"target_cpu": 0}, "--target-cpu"),
    ({"gpu": 1, "server_image": "x:1"}, "--server-image"),
])
def test_bad_options_are_refused_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(DeployError, match=message) as caught:
        KubernetesOptions(**kwargs)
    assert "\n" not in str(caught.value)


def test_replica_defaults_fit_the_given_bounds() -> None:
    assert KubernetesOptions().replica_range == (2, 2, 4)
    assert KubernetesOptions(min_replicas=6).replica_range == (6, 6, 6)
    assert KubernetesOptions(replicas=3, max_replicas=10).replica_range == (3, 3, 10)
    assert KubernetesOptions(min_replicas=1, max_replicas=2).replica_range == (1, 1, 2)


# --------------------------------------------------------------------------- refusals


def test_an_existing_output_is_replaced_only_with_force(sample_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(OutputError, match="already exists; pass --force"):
        deploy_kubernetes(sample_repo, out, KubernetesOptions())
    assert (out / "mine.txt").read_text() == "keep"
    deploy_kubernetes(sample_repo, out, KubernetesOptions(), force=True)
    assert not (out / "mine.txt").exists() and (out / "deployment.yaml").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries


def test_an_output_inside_or_around_the_repository_is_refused(
    sample_repo: Path, tmp_path: Path,
) -> None:
    with pytest.raises(OutputError, match="inside the repository"):
        deploy_kubernetes(sample_repo, sample_repo / "deploy", KubernetesOptions())
    with pytest.raises(OutputError, match="holds the repository"):
        deploy_kubernetes(sample_repo, sample_repo.parent, KubernetesOptions(), force=True)
    assert not (sample_repo / "deploy").exists()


def _copy_repo(sample_repo: Path, tmp_path: Path) -> Path:
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(sample_repo, repo)
    return repo


def test_a_repository_check_repo_rejects_is_refused(sample_repo: Path, tmp_path: Path) -> None:
    repo = _copy_repo(sample_repo, tmp_path)
    (repo / PYTHON_MODEL / "1" / "model.onnx").unlink()
    with pytest.raises(RepositoryError, match="1/model.onnx is missing") as caught:
        deploy_kubernetes(repo, tmp_path / "out", KubernetesOptions())
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_repository_without_the_flavour_is_refused(sample_repo: Path, tmp_path: Path) -> None:
    repo = _copy_repo(sample_repo, tmp_path)
    import shutil

    shutil.rmtree(repo / PYTHON_MODEL)
    with pytest.raises(DeployError, match="holds no python-flavour model"):
        deploy_kubernetes(repo, tmp_path / "out", KubernetesOptions())
    with pytest.raises(DeployError, match="not the onnxruntime flavour"):
        deploy_kubernetes(sample_repo, tmp_path / "out",
                          KubernetesOptions(gpu=1, models=(PYTHON_MODEL,)))
    with pytest.raises(DeployError, match="no model nope"):
        deploy_kubernetes(sample_repo, tmp_path / "out", KubernetesOptions(models=("nope",)))


def test_an_opset_beyond_the_image_onnxruntime_is_refused(
    sample_repo: Path, tmp_path: Path,
) -> None:
    repo = _copy_repo(sample_repo, tmp_path)
    path = repo / ONNXRUNTIME_MODEL / "1" / "model.onnx"
    model = onnx.load(str(path))
    for entry in [*model.opset_import, *(i for f in model.functions for i in f.opset_import)]:
        if entry.domain == "":
            entry.version = triton_releases.TRITON_ORT_MAX_OPSET + 2
    onnx.save(model, str(path))
    with pytest.raises(DeployError, match=f"uses opset {triton_releases.TRITON_ORT_MAX_OPSET + 2}"):
        deploy_kubernetes(repo, tmp_path / "out", KubernetesOptions(gpu=1,
                                                                    model_store="s3://bucket/m"))


def test_a_model_bound_to_a_local_environment_is_refused(
    sample_repo: Path, tmp_path: Path,
) -> None:
    repo = _copy_repo(sample_repo, tmp_path)
    config_path = repo / PYTHON_MODEL / "config.pbtxt"
    config = text_format.Parse(config_path.read_text(), mc.ModelConfig())
    config.parameters["EXECUTION_ENV_PATH"].string_value = os.fspath(tmp_path / "env")
    config_path.write_text(text_format.MessageToString(config))
    with pytest.raises(DeployError, match="EXECUTION_ENV_PATH"):
        deploy_kubernetes(repo, tmp_path / "out", KubernetesOptions())


# --------------------------------------------------------------------------- text models


@pytest.fixture(scope="module")
def text_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with `words` (python flavour, a word tokenizer) and its text model."""
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from tests.serving.onnx_fixtures import build_model, fixture_vocab, save_model

    root = tmp_path_factory.mktemp("text_repo")
    source = save_model(build_model(vocab=fixture_vocab(16)), root / "src" / "words.onnx")
    package_model(source, root / "repo", PackageOptions(name="words"))
    assert sorted(p.name for p in (root / "repo").iterdir()) == ["words", "words_text"]
    return root / "repo"


def test_a_named_text_model_brings_the_id_model_it_calls(text_repo: Path,
                                                         tmp_path: Path) -> None:
    options = KubernetesOptions(models=("words_text",))
    result = deploy_kubernetes(text_repo, tmp_path / "out", options)
    assert result.models == ["words_text", "words"]
    dockerfile = (tmp_path / "out" / "images" / "models.Dockerfile").read_text()
    assert "COPY words_text " in dockerfile and "COPY words " in dockerfile


def test_a_text_model_is_served_in_its_id_model_s_flavour(tmp_path: Path) -> None:
    """A text model runs on the python backend but calls an onnxruntime id model here: it goes
    with that model to GPU pods, and never alone to CPU pods."""
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from tests.serving.onnx_fixtures import build_model, fixture_vocab, save_model

    source = save_model(build_model(vocab=fixture_vocab(16)), tmp_path / "src" / "words.onnx")
    repo = tmp_path / "repo"
    package_model(source, repo, PackageOptions(name="words", flavor="onnxruntime"))
    assert sorted(p.name for p in repo.iterdir()) == ["words", "words_text"]
    gpu = deploy_kubernetes(repo, tmp_path / "gpu", KubernetesOptions(gpu=1))
    assert sorted(gpu.models) == ["words", "words_text"]
    with pytest.raises(DeployError, match="holds no python-flavour model"):
        deploy_kubernetes(repo, tmp_path / "cpu", KubernetesOptions())
    assert not (tmp_path / "cpu").exists()
