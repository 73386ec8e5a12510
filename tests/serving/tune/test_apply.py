"""`--apply`: config.pbtxt replaced atomically, the old one kept, check-repo passing after every
write; int8 as a new version; nothing written when check-repo would refuse the result."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from attndeploy.errors import RepositoryError
from attndeploy.fsutil import atomic_write_text
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.tune.apply import apply_candidate, plan_apply
from attndeploy.serving.tune.configs import read_candidate
from attndeploy.serving.tune.scratch import write_int8_version
from attndeploy.serving.tune.space import Candidate
from attndeploy.serving.tune.target import read_target
from tests.serving.tune.fixtures import NAME, TEXT, TEXT_CALLS, for_call, int8_copy, tiny_repo

TUNED = Candidate(max_batch_size=4, max_queue_delay_us=100, instances=2, threads=1,
                  preferred="max", text_instances=2, text_queue_delay_us=0)


@pytest.fixture(params=TEXT_CALLS)
def call(request):
    """How the tiny text model runs its id model; `repo(tmp_path, call)` packages it so."""
    return request.param


def repo_for(tmp_path, call):
    return tiny_repo(tmp_path, text_bls=call == "bls")


def files(repo):
    return {p.relative_to(repo): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def test_apply_replaces_the_configs_keeps_the_old_ones_and_check_repo_accepts_it(tmp_path,
                                                                                 call):
    repo = repo_for(tmp_path, call)
    old = {name: (repo / name / "config.pbtxt").read_text() for name in (NAME, TEXT)}
    target = read_target(repo, TEXT)
    applied = apply_candidate(target, for_call(TUNED, call))
    report = check_repository(repo)
    assert report.passed, report.summary()
    assert read_candidate(read_target(repo, TEXT).id_config,
                          read_target(repo, TEXT).text_config) == for_call(TUNED, call)
    # run in-process, the text model holds the whole configuration: its id model is untouched
    changed = (TEXT, NAME) if call == "bls" else (TEXT,)
    for name in changed:
        assert (repo / name / "config.pbtxt.previous").read_text() == old[name]
    assert applied["configs"] == {name: str(repo / name / "config.pbtxt") for name in changed}
    if call == "onnxruntime":
        assert (repo / NAME / "config.pbtxt").read_text() == old[NAME]
        assert not (repo / NAME / "config.pbtxt.previous").exists()
    assert applied["new_version"] is None and applied["check_repo"] == "passed"
    assert not [p for p in repo.rglob("*") if p.name.endswith(".tmp")]  # no temporaries


def test_an_int8_choice_becomes_the_next_version_and_the_fp32_one_stays(tmp_path, call):
    repo = repo_for(tmp_path, call)
    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / "tiny.int8.onnx")
    target = read_target(repo, TEXT, int8)
    applied = apply_candidate(target, replace(for_call(TUNED, call), precision="int8"))
    assert applied["served_version"] == 2
    assert (repo / NAME / "2" / "model.onnx").read_bytes() == int8.read_bytes()
    assert (repo / NAME / "1" / "model.onnx").is_file()
    assert not (repo / NAME / "2" / "model.onnx").samefile(int8)  # a copy, not a link
    report = check_repository(repo)
    assert report.passed, report.summary()
    now = read_target(repo, TEXT)
    assert now.version == 2
    assert now.text_config.parameters["ID_MODEL_VERSION"].string_value == "2"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("batch", [2, 32])  # below and above the text model's packaged 8
def test_the_repository_passes_check_repo_after_every_single_write(tmp_path, precision, batch,
                                                                   call):
    repo = repo_for(tmp_path, call)
    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / "q.onnx") if precision == "int8" else None
    target = read_target(repo, TEXT, int8)
    plan = plan_apply(target, replace(for_call(TUNED, call), precision=precision,
                                      max_batch_size=batch))
    if plan.new_version is not None:
        plan.new_version.mkdir()
        write_int8_version(target, plan.new_version, link=False)
        assert check_repository(repo).passed
    # an id config serving both versions with the larger batch (the final one when that is
    # it), the text config, then the final id config; the text config alone when the text
    # model runs the fp32 ONNX itself
    orders = ([NAME, TEXT], [NAME, TEXT, NAME])
    if call == "onnxruntime" and precision == "fp32":
        orders = ([TEXT],)
    assert [w.model for w in plan.writes] in orders
    for write in plan.writes:
        atomic_write_text(write.path, write.text)
        report = check_repository(repo)
        assert report.passed, (write, report.summary())


def test_a_configuration_check_repo_would_refuse_is_not_written(tmp_path, call):
    repo = repo_for(tmp_path, call)
    model_py = repo / NAME / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "# edited\n")
    before = files(repo)
    with pytest.raises(RepositoryError, match="does not pass check-repo, so nothing was written"):
        apply_candidate(read_target(repo, TEXT), for_call(TUNED, call))
    assert files(repo) == before


def test_a_config_changed_while_tuning_is_not_overwritten(tmp_path, call):
    repo = repo_for(tmp_path, call)
    target = read_target(repo, TEXT)
    shutil.copy(repo / TEXT / "config.pbtxt", tmp_path / "kept")
    text = (repo / NAME / "config.pbtxt").read_text().replace("max_batch_size: 8",
                                                             "max_batch_size: 16")
    (repo / NAME / "config.pbtxt").write_text(text)
    before = files(repo)
    with pytest.raises(RepositoryError, match="changed while tuning"):
        apply_candidate(target, for_call(TUNED, call))
    assert files(repo) == before


def test_applying_the_configuration_the_repository_holds_writes_nothing(tmp_path, call):
    repo = repo_for(tmp_path, call)
    before = files(repo)
    target = read_target(repo, TEXT)
    applied = apply_candidate(target, read_candidate(target.id_config, target.text_config))
    assert applied["configs"] == {} and applied["check_repo"] == "unchanged"
    assert files(repo) == before
