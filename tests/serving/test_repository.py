"""Packaging (`package_model`) and the offline repository linter (`check_repository`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import OutputError, RepositoryError
from attndeploy.serving.packaging import repository
from attndeploy.serving.packaging.check_repo import RepoReport, check_repository
from attndeploy.serving.packaging.model_template import generate_model_py
from attndeploy.serving.packaging.repository import Flavor, PackageOptions, package_model

from .onnx_fixtures import build_model, fixture_vocab, save_model


@pytest.fixture
def classifier(tmp_path: Path) -> Path:
    """A classifier whose masked sum is an `attndeploy::MaskedSum` node with its function."""
    return save_model(build_model(custom_op=True), tmp_path / "src" / "classifier.onnx")


def edit_config(model_dir: Path, change: Callable[[mc.ModelConfig], None]) -> None:
    cfg = mc.ModelConfig()
    text_format.Parse((model_dir / "config.pbtxt").read_text(), cfg)
    change(cfg)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(cfg))


def messages(report: RepoReport, severity: str = "error") -> list[str]:
    return [f.message for f in report.findings if f.severity == severity]


def no_hidden_leftovers(repo: Path) -> bool:
    return not [p for p in repo.iterdir() if p.name.startswith(".")] if repo.exists() else True


# --------------------------------------------------------------------------- packaging


def test_a_fresh_python_package_has_the_documented_layout_and_passes(
    classifier: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (model,) = package_model(classifier, repo, PackageOptions(name="cls"))
    assert model.name == "cls" and model.flavor is Flavor.PYTHON and model.path == repo / "cls"
    files = sorted(str(p.relative_to(model.path)) for p in model.path.rglob("*") if p.is_file())
    assert files == ["1/model.onnx", "1/model.py", "config.pbtxt", "labels.txt",
                     "warmup/attention_mask"]
    assert (model.path / "1" / "model.onnx").read_bytes() == classifier.read_bytes()
    assert (model.path / "1" / "model.py").read_text() == generate_model_py()
    assert (model.path / "labels.txt").read_text().splitlines() == ["label_0", "label_1",
                                                                    "label_2"]
    report = check_repository(repo)
    assert report, report.summary()
    assert report.models == ["cls"] and report.findings == []


@pytest.mark.parametrize(
    "fixture", [{"gated": True}, {"head": "tagging"}, {"custom_op": True}, {}],
    ids=["ganet", "tagging", "custom-op", "plain"],
)
def test_both_flavours_are_named_by_suffix_and_pass(
    fixture: dict[str, object], tmp_path: Path
) -> None:
    source = save_model(build_model(**fixture), tmp_path / "m.onnx")  # type: ignore[arg-type]
    models = package_model(source, tmp_path / "repo", PackageOptions(flavor="both", kind="gpu"))
    assert [m.name for m in models] == ["m_python", "m_onnxruntime"]  # named after the file
    assert not (models[1].path / "1" / "model.py").exists()
    report = check_repository(tmp_path / "repo")
    assert report, report.summary()
    assert json.loads(json.dumps(report.to_dict()))["passed"] is True
    assert [m.to_dict()["flavor"] for m in models] == ["python", "onnxruntime"]


def test_an_existing_model_is_replaced_only_with_force(classifier: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    package_model(classifier, repo, PackageOptions(name="cls"))
    marker = repo / "cls" / "marker"
    marker.write_text("old")
    with pytest.raises(RepositoryError, match=r"cls already exist.*pass --force"):
        package_model(classifier, repo, PackageOptions(name="cls", threads=2))
    assert marker.exists()
    package_model(classifier, repo, PackageOptions(name="cls", threads=2, force=True))
    assert not marker.exists()
    assert 'string_value: "2"' in (repo / "cls" / "config.pbtxt").read_text()
    assert no_hidden_leftovers(repo)


def test_with_both_flavours_an_existing_one_blocks_both(classifier: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "m_onnxruntime").mkdir(parents=True)
    with pytest.raises(RepositoryError, match="m_onnxruntime"):
        package_model(classifier, repo, PackageOptions(name="m", flavor="both"))
    assert not (repo / "m_python").exists()


@pytest.mark.parametrize("flavor", ["python", "both"])
def test_a_failure_mid_build_leaves_no_model_folder(
    classifier: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavor: str
) -> None:
    def broken() -> str:
        raise OSError("disk full")

    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setattr(repository, "generate_model_py", broken)
    with pytest.raises(OutputError, match="disk full"):
        package_model(classifier, repo, PackageOptions(name="m", flavor=flavor))
    assert list(repo.iterdir()) == []


def test_a_failed_forced_rebuild_keeps_the_old_model(
    classifier: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    package_model(classifier, repo, PackageOptions(name="cls"))
    before = (repo / "cls" / "config.pbtxt").read_text()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("copy failed")

    monkeypatch.setattr(repository.shutil, "copyfile", broken)
    with pytest.raises(OutputError, match="copy failed"):
        package_model(classifier, repo, PackageOptions(name="cls", threads=3, force=True))
    assert (repo / "cls" / "config.pbtxt").read_text() == before
    assert no_hidden_leftovers(repo)
    assert check_repository(repo)


@pytest.mark.parametrize("theirs", [["same", "same_text"], ["same_text"]],
                         ids=["every-folder", "the-text-model-only"])
def test_a_run_that_loses_a_race_for_a_model_says_so_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, theirs: list[str]
) -> None:
    """Two runs packaging one model at once: both pass the up-front check, and the other one
    renames its folders into place while this one is still writing (some or all of them)."""
    source = save_model(build_model(vocab=fixture_vocab()), tmp_path / "src" / "same.onnx")
    repo = tmp_path / "repo"
    real = repository.write_text_model

    def racing(staging: Path, *args: object, **kwargs: object) -> None:
        real(staging, *args, **kwargs)
        for name in theirs:  # the other run, between this one's check and its commit
            (repo / name).mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text("the other run's")

    monkeypatch.setattr(repository, "write_text_model", racing)
    with pytest.raises(RepositoryError) as caught:
        package_model(source, repo, PackageOptions(name="same"))
    assert str(caught.value) == (f"another run wrote model {theirs[0]} in {repo} at the same "
                                 "time; nothing of this run was kept")
    assert sorted(p.name for p in repo.iterdir()) == theirs  # this run's `same` taken back
    assert all((repo / name / "config.pbtxt").read_text() == "the other run's" for name in theirs)


def test_two_package_runs_at_once_into_one_model_write_it_once_whole(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    source = save_model(build_model(vocab=fixture_vocab()), tmp_path / "same.onnx")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for attempt in range(2):
        repo = tmp_path / f"repo{attempt}"
        argv = [sys.executable, "-m", "attndeploy", "package", str(source), "--repo", str(repo),
                "--model", "same"]
        runs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env) for _ in range(2)]
        done = [(run.wait(timeout=120), run.stderr.read()) for run in runs]  # type: ignore[union-attr]
        for run in runs:
            run.stdout.close()  # type: ignore[union-attr]
            run.stderr.close()  # type: ignore[union-attr]
        assert sorted(code for code, _ in done) == [0, 1], done
        (error,) = [err.strip().splitlines() for code, err in done if code]
        assert len(error) == 1 and error[0].startswith("error (repository): "), error
        assert ("already exist; pass --force" in error[0]
                or "at the same time; nothing of this run was kept" in error[0]), error
        assert sorted(p.name for p in repo.iterdir()) == ["same", "same_text"]
        assert check_repository(repo)


@pytest.mark.parametrize("key", ["attndeploy.variant", "attndeploy.config", "attndeploy.labels"])
def test_a_model_without_attndeploy_metadata_is_refused(key: str, tmp_path: Path) -> None:
    source = save_model(build_model(drop_metadata=[key]), tmp_path / "foreign.onnx")
    with pytest.raises(RepositoryError,
                       match=f"was not exported by attndeploy: its metadata lacks.*{key}"):
        package_model(source, tmp_path / "repo")
    assert not (tmp_path / "repo").exists() or list((tmp_path / "repo").iterdir()) == []


def test_a_custom_node_without_its_function_is_refused(tmp_path: Path) -> None:
    source = save_model(build_model(custom_op=True, with_function=False), tmp_path / "m.onnx")
    with pytest.raises(RepositoryError, match=r"attndeploy::MaskedSum"):
        package_model(source, tmp_path / "repo")


def test_a_file_that_is_not_onnx_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "model.onnx"
    source.write_bytes(b"\xff\xfe not a protobuf")
    with pytest.raises(RepositoryError, match="not an ONNX model"):
        package_model(source, tmp_path / "repo")


def test_a_checkpoint_directory_is_exported_first_by_the_exporter_handed_in(
    tmp_path: Path
) -> None:
    calls: list[Path] = []

    def fake_export(checkpoint: Path, out: Path) -> Path:
        calls.append(checkpoint)
        return save_model(build_model(gated=True), out)

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (model,) = package_model(checkpoint, tmp_path / "repo", exporter=fake_export)
    assert calls == [checkpoint]
    assert model.name == "ckpt" and model.gated  # the checkpoint directory's name
    assert check_repository(tmp_path / "repo")


def test_without_an_exporter_a_checkpoint_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(RepositoryError, match=r"checkpoint directory; export it to ONNX first"):
        package_model(tmp_path / "ckpt", tmp_path / "repo")
    assert not (tmp_path / "repo").exists() or list((tmp_path / "repo").iterdir()) == []


def test_serving_imports_neither_the_exporter_nor_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, attndeploy.serving.packaging.repository, "
            "attndeploy.serving.packaging.check_repo; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith("
            "('attndeploy.export', 'attndeploy.variants'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- check-repo


@pytest.fixture
def packaged(classifier: Path, tmp_path: Path) -> Path:
    """`<repo>/cls`, a freshly packaged python-flavour classifier."""
    package_model(classifier, tmp_path / "repo", PackageOptions(name="cls"))
    return tmp_path / "repo" / "cls"


def test_check_repo_catches_a_wrong_dim(packaged: Path) -> None:
    def change(cfg: mc.ModelConfig) -> None:
        cfg.output[0].dims[:] = [4]

    edit_config(packaged, change)
    report = check_repository(packaged.parent)
    assert not report
    assert any("'logits' has dims [4], expected [3]" in m for m in messages(report))


def test_check_repo_catches_a_fixed_seq_dim(packaged: Path) -> None:
    def change(cfg: mc.ModelConfig) -> None:
        cfg.input[1].dims[:] = [16]

    edit_config(packaged, change)
    assert any("'attention_mask' has dims [16], expected [-1]" in m
               for m in messages(check_repository(packaged.parent)))


def test_check_repo_catches_a_wrong_dtype(packaged: Path) -> None:
    def change(cfg: mc.ModelConfig) -> None:
        cfg.input[0].data_type = mc.TYPE_INT32

    edit_config(packaged, change)
    report = check_repository(packaged.parent)
    assert not report
    assert any("'input_ids' has data_type TYPE_INT32, expected TYPE_INT64" in m
               for m in messages(report))


def test_check_repo_catches_a_renamed_output_in_the_config(packaged: Path) -> None:
    def change(cfg: mc.ModelConfig) -> None:
        cfg.output[0].name = "scores"

    edit_config(packaged, change)
    found = messages(check_repository(packaged.parent))
    assert any("config has no output 'logits'" in m for m in found)
    assert any("unexpected output 'scores'" in m for m in found)


def test_check_repo_catches_a_renamed_output_in_the_onnx_graph(packaged: Path) -> None:
    model = onnx.load(str(packaged / "1" / "model.onnx"))
    model.graph.output[0].name = "scores"
    model.graph.node[-1].output[0] = "scores"
    onnx.save(model, str(packaged / "1" / "model.onnx"))
    found = messages(check_repository(packaged.parent))
    assert any("ONNX graph has no output 'logits'" in m for m in found)


def test_check_repo_catches_a_seq_dim_pinned_in_the_onnx_graph(packaged: Path) -> None:
    model = onnx.load(str(packaged / "1" / "model.onnx"))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 8
    onnx.save(model, str(packaged / "1" / "model.onnx"))
    found = messages(check_repository(packaged.parent))
    assert any("'input_ids' dim 1 (seq) is fixed to 8" in m for m in found)


def test_check_repo_catches_a_missing_version(packaged: Path) -> None:
    shutil.rmtree(packaged / "1")
    report = check_repository(packaged.parent)
    assert not report
    assert messages(report) == ["version 1 is listed in version_policy but has no folder"]


def test_check_repo_catches_a_custom_node_without_function(packaged: Path) -> None:
    model = onnx.load(str(packaged / "1" / "model.onnx"))
    del model.functions[:]
    onnx.save(model, str(packaged / "1" / "model.onnx"))
    assert any("custom node attndeploy::MaskedSum has no model-local function" in m
               for m in messages(check_repository(packaged.parent)))


def test_check_repo_tells_an_edited_model_py_from_another_version(packaged: Path) -> None:
    model_py = packaged / "1" / "model.py"
    model_py.write_text(generate_model_py() + "\n# tweak\n")
    assert any("edited by hand" in m for m in messages(check_repository(packaged.parent)))
    model_py.write_text(generate_model_py().replace("attndeploy 0.1.0", "attndeploy 0.0.9", 1))
    assert any("generated by attndeploy 0.0.9" in m
               for m in messages(check_repository(packaged.parent)))
    model_py.write_text("class TritonPythonModel: ...\n")
    assert any("not generated by attndeploy" in m
               for m in messages(check_repository(packaged.parent)))


def test_check_repo_counts_label_lines(packaged: Path) -> None:
    (packaged / "labels.txt").write_text("a\nb\n")
    assert "labels.txt has 2 line(s), the model has 3 labels" in messages(
        check_repository(packaged.parent)
    )


def test_check_repo_checks_parameters_against_the_model(packaged: Path) -> None:
    def change(cfg: mc.ModelConfig) -> None:
        cfg.parameters["MAX_SEQ"].string_value = "64"
        cfg.parameters["GATED"].string_value = "true"

    edit_config(packaged, change)
    found = messages(check_repository(packaged.parent))
    assert any("MAX_SEQ is '64'" in m for m in found)
    assert any("GATED is 'true'" in m for m in found)


def test_check_repo_rejects_an_all_zero_warmup_mask(packaged: Path) -> None:
    (packaged / "warmup" / "attention_mask").write_bytes(np.zeros(8, np.int64).tobytes())
    assert any("all-zero attention_mask" in m for m in messages(check_repository(packaged.parent)))


def test_check_repo_reports_an_unparsable_config(packaged: Path) -> None:
    (packaged / "config.pbtxt").write_text("max_batch_size: [\n")
    report = check_repository(packaged.parent)
    assert not report and "does not parse" in messages(report)[0]


def test_check_repo_of_an_empty_or_missing_repository(tmp_path: Path) -> None:
    assert messages(check_repository(tmp_path)) == ["the repository holds no model folder"]
    with pytest.raises(RepositoryError, match="not a directory"):
        check_repository(tmp_path / "nowhere")


def test_raise_for_errors_lists_every_error(packaged: Path) -> None:
    edit_config(packaged, lambda cfg: cfg.parameters["HEAD"].MergeFrom(
        mc.ModelParameter(string_value="tagging")))
    (packaged / "labels.txt").write_text("a\n")
    with pytest.raises(RepositoryError) as info:
        check_repository(packaged.parent).raise_for_errors()
    assert "2 error(s)" in str(info.value)
    assert "parameter HEAD is 'tagging'" in str(info.value)
    assert "labels.txt has 1 line(s)" in str(info.value)


# --------------------------------------------------------------------------- unusable outputs


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited, like a `package --force` killed while staging."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.parametrize("where", ["file", "proc"])
def test_a_repo_that_cannot_be_written_is_refused_before_exporting(
    tmp_path: Path, where: str
) -> None:
    calls: list[Path] = []
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    repo = tmp_path / "repo" if where == "file" else Path("/proc/attndeploy-repo")
    if where == "file":
        repo.write_text("not a folder")
    with pytest.raises(OutputError, match="is a file" if where == "file" else "cannot write"):
        package_model(checkpoint, repo, exporter=lambda ckpt, out: calls.append(ckpt))
    assert calls == []


def test_an_empty_or_overlong_model_name_is_refused_clearly() -> None:
    with pytest.raises(RepositoryError, match="the model name is empty"):
        PackageOptions(name="")
    with pytest.raises(RepositoryError, match="is 300 characters long; use at most 128"):
        PackageOptions(name="a" * 300)
    assert PackageOptions(name="a" * 128, flavor="both").name == "a" * 128


def test_the_longest_name_packages_with_both_flavours(classifier: Path, tmp_path: Path) -> None:
    models = package_model(classifier, tmp_path / "repo",
                           PackageOptions(name="a" * 128, flavor="both"))
    assert [m.path.is_dir() for m in models] == [True, True]


@pytest.mark.parametrize("existed", [False, True], ids=["created", "existing"])
def test_a_failed_run_removes_the_repository_it_created_and_only_that(
    classifier: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existed: bool
) -> None:
    def broken() -> str:
        raise OSError("disk full")

    repo = tmp_path / "deep" / "repo"
    if existed:
        repo.mkdir(parents=True)
    monkeypatch.setattr(repository, "generate_model_py", broken)
    with pytest.raises(OutputError, match="disk full"):
        package_model(classifier, repo, PackageOptions(name="m", flavor="both"))
    assert repo.is_dir() == existed
    assert not (tmp_path / "deep").exists() or existed
    assert not repo.exists() or list(repo.iterdir()) == []


def test_stale_staging_folders_of_any_model_are_removed_by_the_next_package(
    classifier: Path, tmp_path: Path, dead_pid: int
) -> None:
    import os

    repo = tmp_path / "repo"
    killed = repo / f".other.{dead_pid}.k3j4h5g6.tmp"  # `package --force` killed while staging
    killed.mkdir(parents=True)
    (killed / "config.pbtxt").write_text("name: 'other'")
    running = repo / f".third.{os.getpid()}.ab12cd34.tmp"  # a packager still at work
    running.mkdir()
    package_model(classifier, repo, PackageOptions(name="cls"))
    assert sorted(p.name for p in repo.iterdir()) == sorted(["cls", running.name])


# --------------------------------------------------------------------------- check-repo: leftovers


def test_check_repo_reports_a_killed_packagers_staging_folder_as_an_error(
    packaged: Path, dead_pid: int
) -> None:
    staging = packaged.parent / f".other.{dead_pid}.k3j4h5g6.tmp"
    staging.mkdir()
    (staging / "config.pbtxt").write_text("name: 'other'")
    report = check_repository(packaged.parent)
    assert not report and report.models == ["cls"]
    (finding,) = report.errors
    assert finding.model == "" and staging.name in finding.message
    assert "interrupted write of other" in finding.message
    assert "remove it, or re-run `attndeploy package`" in finding.message


def test_check_repo_reports_hidden_folders_and_skips_hidden_files(packaged: Path) -> None:
    import os

    (packaged.parent / ".cache").mkdir()
    (packaged.parent / ".attndeploy-server.json").write_text("{}")  # the server's state file
    (packaged.parent / f".cls.{os.getpid()}.ab12cd34.tmp").mkdir()  # a write in progress
    found = messages(check_repository(packaged.parent))
    assert len(found) == 2, found
    assert any(m.startswith("hidden folder .cache is not a model folder") and "remove it" in m
               for m in found)
    assert any(f"process {os.getpid()} is still writing cls" in m for m in found)


@pytest.mark.parametrize("target", ["file", "folder", "nothing"])
@pytest.mark.parametrize("written", ["state", "log"])
def test_check_repo_reports_a_link_where_the_background_server_writes(
    packaged: Path, tmp_path: Path, written: str, target: str
) -> None:
    from attndeploy.serving.server.state import default_log_path, default_state_path

    repo = packaged.parent
    link = (default_state_path if written == "state" else default_log_path)(repo)
    victim = tmp_path / "victim"
    if target == "file":
        victim.write_text("not the server's\n")
    elif target == "folder":
        victim.mkdir()
    link.symlink_to(victim)
    report = check_repository(repo)
    assert not report
    (finding,) = report.errors
    assert finding.model == "" and "\n" not in finding.message
    assert finding.message.startswith(f"{link.name} is a symbolic link")
    assert str(victim) in finding.message and "remove the link" in finding.message
    assert victim.exists() == (target != "nothing")  # reported, never followed or removed


def test_check_repo_passes_the_background_servers_own_state_and_log_files(
    packaged: Path,
) -> None:
    from attndeploy.serving.server.state import default_log_path, default_state_path

    default_state_path(packaged.parent).write_text('{"format": "attndeploy-server-state"}')
    default_log_path(packaged.parent).write_text("I1205 server started\n")
    assert check_repository(packaged.parent)


HUGE = "z" * 600_000


def _huge_output(cfg: mc.ModelConfig) -> None:
    cfg.output.add(name=HUGE, data_type=mc.TYPE_FP32, dims=[1])


def _huge_warmup(cfg: mc.ModelConfig) -> None:
    cfg.model_warmup[0].name = HUGE
    cfg.model_warmup[0].inputs["attention_mask"].zero_data = True  # so that it is named


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda cfg: setattr(cfg, "name", HUGE), "config name 'zzz"),
    (lambda cfg: cfg.parameters["HEAD"].MergeFrom(mc.ModelParameter(string_value=HUGE)),
     "parameter HEAD is 'zzz"),
    (lambda cfg: cfg.parameters["MAX_SEQ"].MergeFrom(mc.ModelParameter(string_value=HUGE)),
     "parameter MAX_SEQ is 'zzz"),
    (_huge_output, "config has an unexpected output 'zzz"),
    (_huge_warmup, "warm-up 'zzz"),
])
def test_check_repo_cuts_every_quoted_value_to_a_bounded_length(
    packaged: Path, edit: Callable[[mc.ModelConfig], None], fragment: str
) -> None:
    edit_config(packaged, edit)
    report = check_repository(packaged.parent)
    found = [m for m in messages(report) if fragment in m]
    assert found, messages(report)
    for message in found:
        assert len(message) < 600 and f"... ({len(HUGE) + 2} characters)" in message, message
    assert len(report.summary()) < 2_000


def test_a_finding_is_one_bounded_line_whatever_it_quotes() -> None:
    from attndeploy.serving.packaging.check_repo import FINDING_LIMIT, Finding

    finding = Finding("m", "error", "line one\n" + "x" * 100_000)
    assert "\n" not in finding.message and len(finding.message) < FINDING_LIMIT + 40
    assert finding.message.startswith("line one\\nxxx")


LONG_NAME = "f" * 5_000  # longer than any file name may be (ENAMETOOLONG)


def _long_label_file(cfg: mc.ModelConfig) -> None:
    cfg.output[0].label_filename = LONG_NAME


def _long_warmup_file(cfg: mc.ModelConfig) -> None:
    cfg.model_warmup[0].inputs["attention_mask"].input_data_file = LONG_NAME


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda cfg: setattr(cfg, "default_model_filename", LONG_NAME), "1/fff"),
    (_long_label_file, "label file fff"),
    (_long_warmup_file, "data file warmup/fff"),
])
def test_check_repo_reports_a_file_name_too_long_to_exist_as_missing(
    packaged: Path, edit: Callable[[mc.ModelConfig], None], fragment: str
) -> None:
    edit_config(packaged, edit)
    found = [m for m in messages(check_repository(packaged.parent)) if fragment in m]
    assert found and all("is missing" in m and len(m) < 600 for m in found), found


def test_check_repo_reports_a_config_that_is_not_utf8(packaged: Path) -> None:
    (packaged / "config.pbtxt").write_bytes(b'name: "cls"\n\xff\xfe\n')
    (message,) = messages(check_repository(packaged.parent))
    assert message == f"{packaged / 'config.pbtxt'} is not UTF-8 text (byte 12 is 0xff)"
