"""`attndeploy deploy kubernetes` as a person runs it: a real subprocess, JSON parsed, and each
bad option one line on stderr with exit code 1 (2 for a usage error), nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attndeploy.deploy.options import MAX_REPLICAS

from .golden_cases import ONNXRUNTIME_MODEL, PYTHON_MODEL, build_sample_repository


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attndeploy", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def one_line_error(result: subprocess.CompletedProcess, stage: str, fragment: str,
                   code: int = 1) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error ({stage}): "), lines[0]
    assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """repo (the sample, both flavours), repo-extra (plus a folder without config.pbtxt) and
    broken-repo (a config that does not parse)."""
    root = tmp_path_factory.mktemp("cli")
    build_sample_repository(root)  # root/repo
    shutil.copytree(root / "repo", root / "repo-extra")
    (root / "repo-extra" / "broken").mkdir()
    (root / "broken-repo" / "m").mkdir(parents=True)
    (root / "broken-repo" / "m" / "config.pbtxt").write_text("not: a config {")
    return root


def test_plain_and_kserve_forms_write_their_files(workdir: Path) -> None:
    plain = run_cli("deploy", "kubernetes", "--repo", "repo", "--out", "plain", "--json",
                    cwd=workdir)
    assert plain.returncode == 0, plain.stderr
    result = json.loads(plain.stdout)
    assert result["models"] == [PYTHON_MODEL] and result["flavor"] == "python"
    assert result["warnings"] == [f"{ONNXRUNTIME_MODEL}: not the python flavour, not served"]
    assert {"deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "README.md",
            "images/models.Dockerfile", "images/server.Dockerfile"} == set(result["files"])
    kserve = run_cli("deploy", "kubernetes", "--repo", "repo", "--out", "kserve", "--kserve",
                     "--model-store", "s3://bucket/models", "--gpu", "1", "--json", cwd=workdir)
    assert kserve.returncode == 0, kserve.stderr
    assert json.loads(kserve.stdout)["files"] == ["README.md", "inferenceservice.yaml"]
    again = run_cli("deploy", "kubernetes", "--repo", "repo", "--out", "plain", cwd=workdir)
    one_line_error(again, "output", "already exists; pass --force")


@pytest.mark.parametrize(("args", "stage", "fragment"), [
    (["--min-replicas", "5", "--max-replicas", "3"], "deploy",
     "--min-replicas 5 is above --max-replicas 3"),
    (["--model-store", "ftp://host/models"], "deploy", "unknown scheme 'ftp://'"),
    (["--model-store", "/data/models"], "deploy", "not a bucket URI"),
    (["--model-store", "pvc://claim/p;touch /tmp/X #"], "deploy",
     "--model-store 'pvc://claim/p;touch /tmp/X #': the path inside the claim must be"),
    (["--model-store", "pvc://claim/a\nb"], "deploy", "--model-store 'pvc://claim/a\\nb'"),
    (["--model-store", "s3://bucket/x;rm -rf /"], "deploy", "the path inside the bucket"),
    (["--max-replicas", "2147483647"], "usage",
     "Invalid value for '--max-replicas': Input should be less than or equal to 1000"),
    (["--max-replicas", "100000000000"], "usage",
     "Invalid value for '--max-replicas': Input should be less than or equal to 1000"),
    (["--replicas", "1001", "--max-replicas", "1000"], "usage",
     "Invalid value for '--replicas': Input should be less than or equal to 1000"),
    (["--min-replicas", "1001"], "usage",
     "Invalid value for '--min-replicas': Input should be less than or equal to 1000"),
    (["--replicas", "0"], "usage",
     "Invalid value for '--replicas': Input should be greater than or equal to 1"),
    (["--gpu", "2147483648"], "deploy", "--gpu must be 0 (CPU) to 2147483647"),
    (["--kserve"], "deploy", "--kserve needs --model-store"),
    (["--image", "nvcr.io/nvidia/tritonserver:23.01-py3"], "deploy", "not in check-repo's table"),
    (["--memory", "lots"], "deploy", "not a Kubernetes quantity"),
    (["--repo", "broken-repo"], "repository", "broken-repo: 1 error(s): m: "),
    (["--repo", "missing"], "repository", "missing is not a directory"),
    (["--out", "repo/deploy", "--repo", "repo"], "output", "inside the repository"),
])
def test_bad_options_are_one_line_errors_and_write_nothing(
    workdir: Path, args: list[str], stage: str, fragment: str,
) -> None:
    before = sorted(p.name for p in workdir.iterdir())
    args = args if "--repo" in args else ["--repo", "repo", *args]
    result = run_cli("deploy", "kubernetes", "--out", "never", *args, cwd=workdir)
    one_line_error(result, stage, fragment, code=2 if stage == "usage" else 1)
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_a_repository_that_check_repo_rejects_is_refused(workdir: Path) -> None:
    result = run_cli("deploy", "kubernetes", "--repo", "repo-extra", "--out", "never",
                     cwd=workdir)
    one_line_error(result, "repository", "broken: config.pbtxt is missing")
    assert not (workdir / "never").exists()


def test_an_unknown_target_is_a_usage_error(workdir: Path) -> None:
    result = run_cli("deploy", "nomad", cwd=workdir)
    one_line_error(result, "usage", "nomad", code=2)


def test_the_readme_names_the_requests_that_end_an_older_release_and_only_then(
        workdir: Path) -> None:
    """The default image (26.05) has neither crash of 2.51; with `--image ...:24.10-py3` the
    README tells what the proxy in front of the pods must refuse."""
    default = run_cli("deploy", "kubernetes", "--repo", "repo", "--out", "newest", cwd=workdir)
    assert default.returncode == 0, default.stderr
    readme = (workdir / "newest" / "README.md").read_text()
    assert "tritonserver:26.05-py3" in readme and "classification extension" not in readme
    older = run_cli("deploy", "kubernetes", "--repo", "repo", "--out", "older", "--image",
                    "nvcr.io/nvidia/tritonserver:24.10-py3", cwd=workdir)
    assert older.returncode == 0, older.stderr
    readme = (workdir / "older" / "README.md").read_text()
    assert "JSON nested more than 64 levels deep over HTTP" in readme
    assert "the classification extension on a BYTES output" in readme


def test_the_replica_bound_is_taken_and_documented(workdir: Path) -> None:
    """`--max-replicas` takes up to MAX_REPLICAS (1000), into the autoscaler, and its help says
    the bound and why (one past it is refused above)."""
    result = run_cli("deploy", "kubernetes", "--repo", "repo", "--out", "bound", "--max-replicas",
                     str(MAX_REPLICAS), cwd=workdir)
    assert result.returncode == 0, result.stderr
    (hpa,) = yaml.safe_load_all((workdir / "bound" / "hpa.yaml").read_text())
    assert hpa["spec"]["maxReplicas"] == MAX_REPLICAS == 1000
    usage = run_cli("deploy", "--help", cwd=workdir)
    help_text = " ".join(usage.stdout.split())
    assert f"At most {MAX_REPLICAS}" in help_text and "practical bound" in help_text
    assert f"[1<=x<={MAX_REPLICAS}]" in help_text
