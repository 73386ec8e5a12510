"""The key of the pods' restricted admin APIs: drawn in the container at each start, from
/dev/urandom, never from anything the API server shows, never written into a manifest or the
README, never printed.

The manifests are walked whole (every file of every shape the command writes), and the start
script is run for real by the shells an image may have, with a stub `tritonserver` that records
how it was started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from attndeploy.deploy import deploy_kubernetes
from attndeploy.deploy import manifests as mf
from attndeploy.serving.server.restricted import ADMIN_KEY_HEADER, restricted_api_arguments

from .golden_cases import CASES, GOLDEN_DIR, build_sample_repository
from .test_deploy_security import README_CASES

# KServe's runtime (`kserve-tritonserver`, 0.14) has no command and these args; KServe appends
# an InferenceService's args to them (MergeRuntimeContainers) and takes its command.
KSERVE_RUNTIME_ARGS = ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000",
                       "--http-port=8080", "--allow-grpc=true", "--allow-http=true"]
# What a key drawn at generation time would look like: a long run of hex or URL-safe base64.
KEY_LIKE = re.compile(r"[0-9a-f]{32,}|[A-Za-z0-9_-]{40,}")


def server_containers(folder: Path) -> list[dict]:
    """The tritonserver container of every manifest in `folder` (a Deployment's, or the
    InferenceService's predictor model, which KServe merges into its runtime's container)."""
    found = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "Deployment":
                found += [c for c in doc["spec"]["template"]["spec"]["containers"]
                          if c["name"] == "tritonserver"]
            elif doc["kind"] == "InferenceService":
                found.append(doc["spec"]["predictor"]["model"])
    return found


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) of a parsed manifest, dict keys and list items included."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}", key
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}[{index}]")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every shape the command writes (the golden cases and the README cases, PVC loaders and
    namespaces included), each written to its own folder."""
    root = tmp_path_factory.mktemp("admin-key")
    repo = build_sample_repository(root)
    shapes = {**{f"golden-{k}": v for k, v in CASES.items()}, **README_CASES}
    folders = {}
    for name, options in shapes.items():
        folders[name] = root / name
        deploy_kubernetes(repo, folders[name], options)
    return folders


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_golden_server_draws_its_key_at_start(case: str) -> None:
    """The command is the start script; the args hold no restricting flag (the script adds them
    with the key) and nothing the kubelet would expand; the container has no env at all."""
    (container,) = server_containers(GOLDEN_DIR / case)
    assert container["command"] == mf.start_command()
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert "env" not in container  # (a bucket's `envFrom` holds the store's credentials only)
    assert not [arg for arg in container["args"] if ADMIN_KEY_HEADER in arg]
    script = container["command"][2]
    for arg in restricted_api_arguments("$key"):
        assert f'"{arg}"' in script  # one quoted word, the shell variable expanded in it
    for word in container["command"] + container["args"]:
        assert "$(" not in word and "$$" not in word  # nothing for the kubelet to expand


def test_kserve_appends_every_plain_flag_but_the_runtime_s_own() -> None:
    """KServe's runtime sets the repository and ports and appends the InferenceService's args:
    those are the Deployment's flags less the runtime's, so no guarantee is left out; the
    command, which adds the restricting flags, is the same."""
    (plain,) = server_containers(GOLDEN_DIR / "plain-gpu-s3")
    (kserve,) = server_containers(GOLDEN_DIR / "kserve-gpu-gs")
    flags = [arg.split("=", 1)[0] for arg in kserve["args"]]
    assert not set(flags) & set(mf.KSERVE_RUNTIME_FLAGS)
    assert kserve["args"] == [arg for arg in plain["args"]
                              if arg.split("=", 1)[0] not in mf.KSERVE_RUNTIME_FLAGS]
    assert "--model-control-mode=none" in kserve["args"]
    assert kserve["command"] == plain["command"] == mf.start_command()


def test_no_manifest_derives_the_key_from_what_the_api_server_shows(
        generated: dict[str, Path]) -> None:
    """Walk every document of every manifest: no pod field (`fieldRef`, the Downward API) and
    no `valueFrom` at all; the header's name only in the start script, where its value is the
    shell variable the script drew."""
    documents = 0
    for name, folder in generated.items():
        for path in sorted(folder.rglob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                documents += 1
                where = f"{name}/{path.relative_to(folder)}"
                for at, value in walk(doc):
                    assert value not in ("fieldRef", "resourceFieldRef", "valueFrom",
                                         "downwardAPI"), (where, at)
                    if isinstance(value, str):
                        assert "metadata.uid" not in value, (where, at)
                        if ADMIN_KEY_HEADER in value:
                            assert value == mf.START_SCRIPT, (where, at)
                            assert set(re.findall(f"{ADMIN_KEY_HEADER}=(\\S+?)\"", value)) \
                                == {"$key"}, (where, at)
    assert documents >= 2 * len(generated)


def without_folders(text: str, out: Path) -> str:
    """`text` with the output folder and the repository beside it (`out.parent / "repo"`) named
    by placeholders."""
    return text.replace(str(out), "OUT").replace(str(out.parent / "repo"), "REPO")


def test_no_key_is_written_into_any_generated_file(
        generated: dict[str, Path], tmp_path: Path) -> None:
    """A key drawn when the files are written would be in them, and differ from one run to
    the next: the files (README included) hold nothing key-like near the header, and a second
    run writes the same bytes."""
    repo = build_sample_repository(tmp_path)
    for name, folder in generated.items():
        options = {**{f"golden-{k}": v for k, v in CASES.items()}, **README_CASES}[name]
        again = tmp_path / name
        deploy_kubernetes(repo, again, options)
        files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
        for relative in files:
            text = (folder / relative).read_text()
            # the two runs differ in their folders only (the README names them)
            assert without_folders(text, folder) == without_folders(
                (again / relative).read_text(), again), (name, relative)
            for line in text.splitlines():
                if ADMIN_KEY_HEADER in line or "admin key" in line.lower():
                    assert not KEY_LIKE.search(line.split(ADMIN_KEY_HEADER)[-1]), (name, line)
        readme = (folder / "README.md").read_text()
        assert "UID" not in readme and "/dev/urandom" in readme


# --------------------------------------------------------------------------- the script, run

SHELLS = [shell for shell in ("/bin/sh", shutil.which("dash"), shutil.which("bash")) if shell]

STUB = """#!/bin/sh
printf '%s\\n' "$$" > "$STUB_OUT.pid"
printf '%s\\0' "$(basename "$0")" "$@" > "$STUB_OUT.argv"
env > "$STUB_OUT.env"
"""


def start(shell: str, args: list[str], tmp_path: Path, *,
          broken_od: str | None = None) -> tuple[subprocess.CompletedProcess, int, Path]:
    """Run the container's command (`shell` for /bin/sh) with `args`, a stub `tritonserver` on
    PATH; `broken_od` replaces `od` with a script of that body. (result, pid, stub's out)."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    (stubs / "tritonserver").write_text(STUB)
    if broken_od is not None:
        (stubs / "od").write_text(f"#!/bin/sh\n{broken_od}\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    out = tmp_path / "stub"
    _, flag, script, name = mf.start_command()
    process = subprocess.Popen(
        [shell, flag, script, name, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={"PATH": f"{stubs}{os.pathsep}/usr/bin{os.pathsep}/bin",
                        "STUB_OUT": str(out)})
    stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), \
        process.pid, out


def started_with(out: Path) -> list[str]:
    return out.with_suffix(".argv").read_text().split("\0")[:-1]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("form", ["plain", "kserve"])
def test_the_start_script_draws_a_fresh_key_and_execs_tritonserver_with_it(
        shell: str, form: str, tmp_path: Path) -> None:
    """The plain Deployment's args are tritonserver's flags; KServe's are its runtime's
    (`tritonserver --model-store=...`) then ours. Either way tritonserver runs with exactly
    those flags and the two restricting ones, holding 64 hex digits drawn anew at each start;
    it replaces the shell (same pid: the container's process 1, which gets SIGTERM); the key is
    in no env var and nothing is printed."""
    flags = mf.kserve_arguments(gpu_metrics=False) if form == "kserve" else mf.triton_arguments(
        mf.MODELS_MOUNT)
    args = KSERVE_RUNTIME_ARGS + flags if form == "kserve" else flags
    keys = set()
    for attempt in range(2):
        run_dir = tmp_path / str(attempt)
        run_dir.mkdir()
        result, pid, out = start(shell, args, run_dir)
        assert result.returncode == 0, result.stderr
        assert (result.stdout, result.stderr) == ("", "")
        argv = started_with(out)
        key = argv[-1].rsplit("=", 1)[1]
        assert re.fullmatch(r"[0-9a-f]{64}", key), argv[-2:]
        expected = args if form == "kserve" else ["tritonserver", *args]
        assert argv == expected + restricted_api_arguments(key)
        assert int(out.with_suffix(".pid").read_text()) == pid  # exec'd, not a child
        assert key not in out.with_suffix(".env").read_text()
        keys.add(key)
    assert len(keys) == 2


@pytest.mark.parametrize("od", [
    "exit 1",  # od fails: nothing drawn
    "printf ' %s' 00 11",  # too short
    "printf 'zz%.0s' $(seq 32)",  # the right length, not hex
])
def test_the_start_script_refuses_to_start_without_a_key(od: str, tmp_path: Path) -> None:
    """No key, no server: tritonserver is not started with an empty or a partial key, and the
    one line on stderr says why."""
    result, _, out = start("/bin/sh", mf.triton_arguments(mf.MODELS_MOUNT), tmp_path,
                           broken_od=od)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"{mf.START_NAME}: no key drawn from /dev/urandom; not starting tritonserver"]
    assert not out.with_suffix(".argv").exists()
