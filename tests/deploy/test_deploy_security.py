"""What the generated folder lets through: the README's shell commands, the values the options
take, and the packages the server image needs (the pods' admin APIs: test_admin_key.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.deploy import KubernetesOptions, deploy_kubernetes, parse_model_store
from attndeploy.deploy import manifests as mf
from attndeploy.deploy.kubernetes import (
    MODELS_DOCKERFILE,
    PVC_LOADER,
    SERVER_DOCKERFILE,
    instructions,
    pip_requirement,
)
from attndeploy.deploy.options import INT32_MAX, MAX_REPLICAS, SERVER_PACKAGES, ModelStore
from attndeploy.errors import DeployError
from attndeploy.runtime.shipping import TOKENIZER_TYPES
from attndeploy.serving.packaging.triton_releases import TRITON_RELEASE

from .golden_cases import PYTHON_MODEL, build_sample_repository
from .k8s_schema import validate

# --------------------------------------------------------------------------- the README's commands

# A folder name a shell would act on if it were pasted unquoted: a command separator, command
# substitutions both ways, quotes of both kinds, redirections, a background '&', a comment.
HOSTILE = "a b;touch INJECTED #$(touch INJECTED)`touch INJECTED`'\"&|<>(x)*?~"
COMMAND_WORDS = ("kubectl", "docker", "aws", "gsutil", "attndeploy")
OPERATOR_CHARS = set("();<>|&")

# Every README shape: local repository (image builds), PVC, S3, GCS, KServe, a namespace.
README_CASES = {
    "local": KubernetesOptions(namespace="ml"),
    "local-named-images": KubernetesOptions(models_image="registry.example.com/m:v1",
                                            server_image="registry.example.com/s:v1"),
    "pvc": KubernetesOptions(model_store="pvc://models-claim/a/b.c", namespace="ml"),
    "pvc-root": KubernetesOptions(model_store="models-claim"),
    "s3": KubernetesOptions(gpu=1, model_store="s3://models.bucket-1/x/y=z@w,v+u", namespace="ml"),
    "gs-kserve": KubernetesOptions(kserve=True, model_store="gs://models_bucket/t",
                                   namespace="ml"),
}


def code_spans(line: str) -> list[str]:
    """The code spans of a Markdown line, as CommonMark reads them: a run of backticks opens
    one, the next run of the same length closes it; one space is stripped from both ends when
    both are spaces."""
    spans = []
    for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", line):
        text = match[2]
        spans.append(text[1:-1] if text.startswith(" ") and text.endswith(" ")
                     and text.strip() else text)
    return spans


def command_lines(readme: str) -> list[str]:
    """The shell commands of a README: every line of a ```bash block, and every inline code
    span that starts with one of `COMMAND_WORDS`."""
    lines, fenced = [], False
    for line in readme.splitlines():
        if line.startswith("```"):
            fenced = line == "```bash"
            continue
        if fenced:
            lines.append(line)
        else:
            lines += [span for span in code_spans(line)
                      if span.split(" ", 1)[0] in COMMAND_WORDS]
    return lines


def operator_tokens(line: str) -> list[str]:
    """The tokens of `line` that a shell reads as control operators or redirections."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = False
    lexer.commenters = ""  # a '#' must not hide what follows it
    return [token for token in lexer if token and set(token) <= OPERATOR_CHARS]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, str]]:
    """{case: (repository, output folder, README text)}: the sample repository in a folder named
    with `HOSTILE`, each README_CASES case written to another such folder."""
    root = tmp_path_factory.mktemp("hostile")
    built = build_sample_repository(root)
    repo = built.parent / f"repo {HOSTILE}"
    built.rename(repo)
    folders = {}
    for case, options in README_CASES.items():
        out = root / f"{case} {HOSTILE}"
        deploy_kubernetes(repo, out, options)
        folders[case] = (repo, out, (out / "README.md").read_text())
    return folders


def user_paths(repo: Path, out: Path, models: tuple[str, ...] | None = None) -> set[str]:
    """Every local path a README command may hold, each of which must stay one word (`models`:
    the model folders, by default those of `repo`)."""
    if models is None:
        models = tuple(p.name for p in repo.iterdir() if p.is_dir())
    return {str(p) for p in (repo, out, out / "images", out / MODELS_DOCKERFILE,
                             out / SERVER_DOCKERFILE, out / PVC_LOADER,
                             *(repo / m for m in models))}


STUB = """#!/bin/sh
printf '%s\\0' "$(basename "$0")" "$@" >> "$STUB_LOG"
printf '\\n' >> "$STUB_LOG"
"""


def check_commands(readme: str, values: set[str], workdir: Path) -> list[list[str]]:
    """Hold every command line of `readme` to the shell's reading; return each line's words.

    - it parses (`shlex.split`), and holds no comment, control operator nor redirection outside
      quotes but the one trailing `&` of the port-forward line;
    - a word that holds a piece of a hostile value ("INJECTED") holds all of it: it is one of
      `values`, or it holds `HOSTILE` whole (a value joined to constant text, as `pod:PATH`);
      every value quoted in the line is one of its words;
    - run by bash with stubs for its programs, it calls its program with exactly those words,
      and nothing of a value runs (no `touch INJECTED` lands in the working folder).
    """
    lines = command_lines(readme)
    assert len(lines) >= 3
    stubs = workdir / "bin"
    stubs.mkdir()
    for word in COMMAND_WORDS:
        (stubs / word).write_text(STUB)
        (stubs / word).chmod(0o755)
    bash = shutil.which("bash")
    cwd = workdir / "cwd"
    cwd.mkdir()
    every = []
    for line in lines:
        assert line.split(" ", 1)[0] in COMMAND_WORDS, line  # nothing else in a bash block
        words = shlex.split(line, posix=True)
        assert shlex.split(line, comments=True) == words, line  # no '#' comment outside quotes
        operators = operator_tokens(line)
        if " port-forward " in line:  # by design: the forward runs in the background
            assert line.endswith(" &") and operators == ["&"], line
        else:
            assert operators == [], (line, operators)
        for word in words:
            if "INJECTED" in word:
                assert word in values or HOSTILE in word, (line, word)
        for value in values:
            if shlex.quote(value) in line:
                assert value in words, (line, value)
        every.append(words)
        if bash is None:
            continue
        log = workdir / "calls.log"
        log.write_bytes(b"")
        subprocess.run([bash, "-c", f"{line}\nwait"], cwd=cwd, check=True, timeout=30,
                       env={"PATH": f"{stubs}{os.pathsep}/usr/bin{os.pathsep}/bin",
                            "STUB_LOG": str(log)})
        calls = [call.split("\0") for call in log.read_text().split("\0\n") if call]
        assert calls == [shlex.split(line.removesuffix(" &"))], (line, calls)
    assert list(cwd.iterdir()) == []  # no `touch INJECTED` ran
    return every


@pytest.mark.parametrize("case", sorted(README_CASES))
def test_every_readme_command_keeps_each_local_path_one_word(
    case: str, hostile: dict[str, tuple[Path, Path, str]], tmp_path: Path,
) -> None:
    """The repository and output folders are the user's to name, with any character: every
    command that holds one holds it as one word, and nothing of it runs."""
    repo, out, readme = hostile[case]
    every = check_commands(readme, user_paths(repo, out), tmp_path)
    # the prose names the repository in one code span, backticks and all
    assert str(repo) in [span for line in readme.splitlines() for span in code_spans(line)]
    if case == "local":
        (build,) = [w for w in every if w[:2] == ["docker", "build"] and str(repo) in w]
        assert build[-3:] == ["-f", str(out / MODELS_DOCKERFILE), str(repo)]
    if case.startswith("pvc"):
        copies = [w for w in every if "cp" in w]
        assert copies and all(str(repo / PYTHON_MODEL) in w for w in copies)
    if case == "s3":
        (sync,) = [w for w in every if w[:3] == ["aws", "s3", "sync"]]
        assert sync[-2:] == [str(repo / "cls_onnxruntime"),
                             "s3://models.bucket-1/x/y=z@w,v+u/cls_onnxruntime"]
    assert ["kubectl", "apply", "-f", str(out)] in every


# Stores whose names and paths no check would let through, for the test below.
UNCHECKED_STORES = {
    "local": None,
    "pvc": ModelStore("pvc", f"pvc://{HOSTILE}/{HOSTILE}", claim=HOSTILE, path=HOSTILE),
    "s3": ModelStore("s3", f"s3://{HOSTILE}/{HOSTILE}"),
    "gs-kserve": ModelStore("gs", f"gs://{HOSTILE}"),
}


@pytest.mark.parametrize("case", sorted(UNCHECKED_STORES))
def test_the_readme_quotes_every_value_even_one_no_check_would_pass(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Quoting does not lean on validation: with every value hostile (the namespace, the name
    and so the pod names, the images, the model names, the store's claim, path and bucket, the
    local paths), every command line still keeps each one a word, and runs none of it."""
    store = UNCHECKED_STORES[case]
    options = KubernetesOptions(kserve=case == "gs-kserve", model_store="s3://abc"
                                if case == "gs-kserve" else None)
    for field, value in (("namespace", HOSTILE), ("name", HOSTILE),
                         ("server_image", f"img:{HOSTILE}")):
        object.__setattr__(options, field, value)  # past the frozen options' checks
    monkeypatch.setattr(mf.Plan, "store", property(lambda _: store))
    models = (f"m1 {HOSTILE}", f"m2 {HOSTILE}")
    plan = mf.Plan(options=options, models=models, models_image=f"models:{HOSTILE}")
    repo, out = tmp_path / f"repo {HOSTILE}", tmp_path / f"out {HOSTILE}"
    images = {f"models:{HOSTILE}": MODELS_DOCKERFILE, f"img:{HOSTILE}": SERVER_DOCKERFILE}
    readme = instructions(repo, out, plan, images)
    work = tmp_path / "work"
    work.mkdir()
    every = check_commands(readme, user_paths(repo, out, models), work)
    namespaced = [w for w in every if w[0] == "kubectl" and w[1:3] == ["-n", HOSTILE]]
    assert namespaced  # `-n NAMESPACE`, the namespace one word
    assert ["kubectl", "create", "namespace", HOSTILE] in [
        shlex.split(span) for span in command_lines(readme)]
    if store is not None and store.kind == "pvc":
        pod = f"{HOSTILE}-pvc-loader"
        assert ["kubectl", "-n", HOSTILE, "exec", pod, "--", "mkdir", "-p",
                f"/models/{HOSTILE}"] in every
        assert ["kubectl", "-n", HOSTILE, "cp", str(repo / models[0]),
                f"{pod}:/models/{HOSTILE}/{models[0]}"] in every
    if not options.kserve:
        (infer,) = [w for w in every if w[0] == "attndeploy"]
        assert infer[:4] == ["attndeploy", "infer", "--model", models[0]]


def test_a_local_path_with_a_control_character_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="--out .*control character") as caught:
        deploy_kubernetes(tmp_path, tmp_path / "out\nx", KubernetesOptions())
    assert "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir())


def test_a_model_folder_name_a_shell_would_read_is_refused(tmp_path: Path) -> None:
    repo = build_sample_repository(tmp_path)
    odd = repo / "cls python;x"
    (repo / PYTHON_MODEL).rename(odd)
    config = text_format.Parse((odd / "config.pbtxt").read_text(), mc.ModelConfig())
    config.name = ""  # Triton takes the folder's name
    (odd / "config.pbtxt").write_text(text_format.MessageToString(config))
    with pytest.raises(DeployError, match=r"model folder 'cls python;x'.*rename it"):
        deploy_kubernetes(repo, tmp_path / "out", KubernetesOptions())
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- --model-store


@pytest.mark.parametrize("text", [
    "pvc://claim/p;touch /tmp/X #",
    "pvc://claim/a\nb",
    "pvc://claim/../x",
    "pvc://claim/a/./b",
    "pvc://claim//abs",
    "pvc://claim/a//b",
    "pvc://claim/a b",
    "pvc://claim/$(id)",
    "pvc://claim/`id`",
    "pvc://claim/a'b",
    "pvc://claim/a=b",  # a PVC folder keeps to letters, digits, '.', '_', '-'
    "s3://bucket/a b",
    "s3://bucket/x;rm -rf /",
    "s3://bucket/a\nb",
    "s3://bucket/../x",
    "s3://bucket/a\"b",
    "s3://bucket/a:b",
    "s3://Bucket/x",  # upper case
    "s3://my_bucket/x",  # '_' is GCS's, not S3's
    "s3://ab/x",  # too short
    f"s3://{'b' * 64}/x",  # too long
    "s3://-bucket/x",
    "s3://bucket-/x",
    "s3://my..bucket/x",
    "s3://192.168.1.1/x",
    "s3://https:/host/bucket",  # Triton's endpoint form is not taken
    "s3://bucket;id/x",
    "gs://b/$(id)",
    "gs://bucket/$(id)",
    "gs://bucket/a|b",
    "gs://bucket/a&b",
    "gs://bucket/a>b",
    "gs://Bucket/x",
    f"gs://{'b' * 64}",
    f"gs://{'b' * 64}.example.com",  # a dotted name's parts are at most 63 long
])
def test_a_model_store_a_shell_or_a_cloud_would_misread_is_refused(text: str) -> None:
    with pytest.raises(DeployError, match="^--model-store ") as caught:
        parse_model_store(text)
    assert "\n" not in str(caught.value)
    with pytest.raises(DeployError, match="^--model-store "):
        KubernetesOptions(model_store=text)


@pytest.mark.parametrize(("text", "uri"), [
    ("pvc://claim/a.b/c_d-e/", "pvc://claim/a.b/c_d-e"),
    ("pvc://claim/...", "pvc://claim/..."),  # a name of dots, not a parent
    ("s3://my.bucket-1/a/b=c/d@e,f+g", "s3://my.bucket-1/a/b=c/d@e,f+g"),
    ("s3://abc", "s3://abc"),
    ("gs://my_bucket.example.com/x/", "gs://my_bucket.example.com/x"),
])
def test_a_model_store_of_safe_names_is_taken(text: str, uri: str) -> None:
    assert parse_model_store(text).uri == uri


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize("option", ["replicas", "min_replicas", "max_replicas"])
def test_a_replica_count_beyond_the_practical_bound_is_refused(option: str) -> None:
    """The library refuses what the CLI's range refuses: one past MAX_REPLICAS, and int32's
    largest, which Kubernetes would take."""
    kwargs = {"replicas": 1, "min_replicas": 1} if option == "max_replicas" else {}
    for value in (MAX_REPLICAS + 1, INT32_MAX, 100_000_000_000):
        with pytest.raises(DeployError, match=f"--{option.replace('_', '-')} must be at most "
                                              f"{MAX_REPLICAS} \\(a practical bound") as caught:
            KubernetesOptions(**{**kwargs, option: value})
        assert "\n" not in str(caught.value)


def test_the_largest_counts_make_manifests_the_schema_takes(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match=f"--gpu must be 0 \\(CPU\\) to {INT32_MAX}"):
        KubernetesOptions(gpu=INT32_MAX + 1)
    options = KubernetesOptions(replicas=MAX_REPLICAS, max_replicas=MAX_REPLICAS, gpu=INT32_MAX,
                                model_store="s3://abc")
    assert options.replica_range == (MAX_REPLICAS, MAX_REPLICAS, MAX_REPLICAS)
    repo = build_sample_repository(tmp_path)
    deploy_kubernetes(repo, tmp_path / "out", options)
    (hpa,) = yaml.safe_load_all((tmp_path / "out" / "hpa.yaml").read_text())
    assert hpa["spec"]["maxReplicas"] == MAX_REPLICAS
    validate(hpa)
    (deployment,) = yaml.safe_load_all((tmp_path / "out" / "deployment.yaml").read_text())
    assert deployment["spec"]["replicas"] == MAX_REPLICAS
    validate(deployment)


# --------------------------------------------------------------------------- the server image


def test_every_package_a_tokenizer_needs_has_a_pinned_series() -> None:
    """A tokenizer type that needs a package (TOKENIZER_TYPES) must say which series the server
    image installs, or images/server.Dockerfile could not install it."""
    needed = {entry.requires for entry in TOKENIZER_TYPES.values() if entry.requires}
    assert needed <= set(SERVER_PACKAGES)
    assert pip_requirement("tokenizers") == f"tokenizers~={SERVER_PACKAGES['tokenizers']}.0"


@pytest.fixture(scope="module")
def wordpiece_repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A WordPiece text model packaged in the python flavour (`python`) and in the onnxruntime
    flavour (`onnxruntime`), each in its own repository."""
    pytest.importorskip("tokenizers")
    from .wordpiece_repo import package_wordpiece_model

    root = tmp_path_factory.mktemp("wordpiece")
    return {flavor: package_wordpiece_model(root / flavor, root / flavor / "repo", flavor=flavor)
            for flavor in ("python", "onnxruntime")}


def test_the_built_server_image_installs_tokenizers_for_a_wordpiece_text_model(
    wordpiece_repos: dict[str, Path], tmp_path: Path,
) -> None:
    result = deploy_kubernetes(wordpiece_repos["python"], tmp_path / "out", KubernetesOptions())
    assert sorted(result.models) == ["words", "words_text"]
    assert result.warnings == []
    lines = (tmp_path / "out" / SERVER_DOCKERFILE).read_text().splitlines()
    (run,) = [line for line in lines if line.startswith("RUN ")]
    assert shlex.split(run)[-2:] == [f"onnxruntime~={TRITON_RELEASE.onnxruntime}.0",
                                     f"tokenizers~={SERVER_PACKAGES['tokenizers']}.0"]
    # a new tag for a new content: a node holding the image without tokenizers never reuses it
    assert result.image.endswith(f"-tokenizers{SERVER_PACKAGES['tokenizers']}")
    assert result.images_to_build[result.image] == SERVER_DOCKERFILE
    (deployment,) = yaml.safe_load_all((tmp_path / "out" / "deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == result.image


def test_a_word_tokenizer_text_model_needs_no_more_than_onnxruntime(tmp_path: Path) -> None:
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from tests.serving.onnx_fixtures import build_model, fixture_vocab, save_model

    source = save_model(build_model(vocab=fixture_vocab(16)), tmp_path / "src" / "w.onnx")
    package_model(source, tmp_path / "repo", PackageOptions(name="w"))
    result = deploy_kubernetes(tmp_path / "repo", tmp_path / "out", KubernetesOptions())
    assert sorted(result.models) == ["w", "w_text"] and result.warnings == []
    assert "tokenizers" not in (tmp_path / "out" / SERVER_DOCKERFILE).read_text()
    assert "tokenizers" not in result.image


def test_a_named_server_image_is_told_to_have_tokenizers(
    wordpiece_repos: dict[str, Path], tmp_path: Path,
) -> None:
    image = "registry.example.com/ml/my-triton:1"
    result = deploy_kubernetes(wordpiece_repos["python"], tmp_path / "out",
                               KubernetesOptions(server_image=image))
    (warning,) = result.warnings
    assert warning.startswith("words_text: its wordpiece tokenizer needs the Python package "
                              "'tokenizers'")
    assert f"--server-image {image} must have it installed" in warning
    assert result.image == image
    assert not (tmp_path / "out" / SERVER_DOCKERFILE).exists()


def test_gpu_pods_are_told_their_image_needs_tokenizers(
    wordpiece_repos: dict[str, Path], tmp_path: Path,
) -> None:
    """With GPUs the text model runs on --image's python backend; the NGC image has no
    `tokenizers`, and nothing here builds one."""
    result = deploy_kubernetes(wordpiece_repos["onnxruntime"], tmp_path / "out",
                               KubernetesOptions(gpu=1, model_store="s3://abc/m"))
    assert sorted(result.models) == ["words", "words_text"]
    (warning,) = [w for w in result.warnings if "tokenizers" in w]
    assert warning.startswith("words_text: ")
    assert f"--image {KubernetesOptions().image}" in warning
    assert pip_requirement("tokenizers") in warning
