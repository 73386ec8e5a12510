"""The sample repository and the golden deployment cases.

Shared by the tests and by `python -m tests.deploy.golden_cases`, which rewrites the golden
folders after an intended change (review the diff before committing it). Manifests are compared
parsed (YAML documents), Dockerfiles without their comment lines; the README is not golden.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from attndeploy.deploy import KubernetesOptions, deploy_kubernetes
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from tests.serving.onnx_fixtures import build_model, save_model

GOLDEN_DIR = Path(__file__).parent / "golden"
SAMPLE = "cls"  # the sample model: cls_python and cls_onnxruntime (KIND_GPU)
PYTHON_MODEL, ONNXRUNTIME_MODEL = f"{SAMPLE}_python", f"{SAMPLE}_onnxruntime"

CASES: dict[str, KubernetesOptions] = {
    # the default: CPU pods, python flavour, the repository shipped in an image
    "plain-cpu-local": KubernetesOptions(
        models_image="registry.example.com/ml/attndeploy-models:v1"),
    # GPUs, onnxruntime flavour, read from S3 by Triton, in a namespace
    "plain-gpu-s3": KubernetesOptions(
        gpu=1, model_store="s3://models-bucket/triton", namespace="ml", replicas=3,
        max_replicas=6, cpu="4", memory="8Gi", name="ganet-triton"),
    # KServe on CPUs, the repository in a folder of a PVC
    "kserve-cpu-pvc": KubernetesOptions(
        kserve=True, model_store="pvc://models-claim/triton", min_replicas=1, max_replicas=3),
    # KServe on GPUs from GCS
    "kserve-gpu-gs": KubernetesOptions(kserve=True, gpu=2, model_store="gs://models/triton"),
}


def build_sample_repository(root: Path) -> Path:
    """`root/repo` with the sample model in both flavours (onnxruntime instances on GPU)."""
    source = save_model(build_model(custom_op=True), root / "src" / "classifier.onnx")
    repo = root / "repo"
    package_model(source, repo, PackageOptions(name=SAMPLE, flavor="both", kind="gpu"))
    return repo


def generate(case: str, repo: Path, out: Path) -> Path:
    deploy_kubernetes(repo, out, CASES[case], force=True)
    return out


def compared_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and p.name != "README.md")


def comparable(path: Path) -> Any:
    """A manifest's documents, or a Dockerfile's lines without comments."""
    text = path.read_text()
    if path.suffix == ".yaml":
        return list(yaml.safe_load_all(text))
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_sample_repository(Path(tmp))
        for case in CASES:
            out = generate(case, repo, Path(tmp) / case)
            target = GOLDEN_DIR / case
            shutil.rmtree(target, ignore_errors=True)
            for relative in compared_files(out):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(out / relative, target / relative)
            print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
