"""Candidates to and from Triton configs, and the scratch repository that holds one."""

from __future__ import annotations

import pytest

from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.options import PackageOptions
from attndeploy.serving.tune.configs import (
    candidate_configs,
    package_default,
    read_candidate,
)
from attndeploy.serving.tune.scratch import materialize
from attndeploy.serving.tune.space import Candidate
from attndeploy.serving.tune.target import read_target
from tests.serving.tune.fixtures import NAME, TEXT, TEXT_CALLS, for_call, int8_copy, tiny_repo

TUNED = Candidate(max_batch_size=16, max_queue_delay_us=250, instances=2, threads=1,
                  preferred="half+max", text_instances=2, text_queue_delay_us=100)


@pytest.fixture(params=TEXT_CALLS)
def call(request):
    return request.param


def test_the_package_default_is_what_package_writes_with_its_defaults(tmp_path, call):
    target = read_target(tiny_repo(tmp_path, text_bls=call == "bls"), TEXT)
    options = PackageOptions()
    default = package_default(target)
    assert (default.max_batch_size, default.max_queue_delay_us, default.instances,
            default.threads) == (options.max_batch_size, options.max_queue_delay_us,
                                 options.instances, options.threads)
    # BLS: the text model's own instances are tuned too; run in-process, it is the model
    assert default.text_instances == (options.text_instances if call == "bls" else None)
    assert default == read_candidate(target.id_config, target.text_config)  # packaged so


def test_a_candidate_written_into_configs_reads_back_as_itself(tmp_path, call):
    target = read_target(tiny_repo(tmp_path, text_bls=call == "bls"), TEXT)
    tuned = for_call(TUNED, call)
    configs = candidate_configs(target, tuned)
    assert read_candidate(configs[NAME], configs[TEXT]) == tuned
    assert configs[TEXT].max_batch_size == 16  # tied to the id model's, or its own
    if call == "bls":
        assert list(configs[NAME].dynamic_batching.preferred_batch_size) == [8, 16]
        assert configs[NAME].parameters[cfgmod.PARAM_MAX_SEQ] == target.id_config.parameters[
            cfgmod.PARAM_MAX_SEQ]  # everything else kept as packaged
    else:  # the text model holds it all; the id model is not on the text path
        assert list(configs[TEXT].dynamic_batching.preferred_batch_size) == [8, 16]
        assert configs[TEXT].parameters[cfgmod.PARAM_ORT_THREADS].string_value == "1"
        assert [g.count for g in configs[TEXT].instance_group] == [2]
        assert configs[NAME] == target.id_config


def test_a_scratch_repository_passes_check_repo_and_leaves_the_original_alone(tmp_path):
    repo = tiny_repo(tmp_path)
    before = (repo / NAME / "config.pbtxt").read_text()
    target = read_target(repo, TEXT, int8_copy(tmp_path / "tiny.onnx", tmp_path / "q.onnx"))
    scratch = materialize(target, Candidate(**{**TUNED.__dict__, "precision": "int8"}),
                          tmp_path / "scratch")
    report = check_repository(scratch)
    assert report.passed, report.summary()
    configs = {name: cfgmod.parse_config((scratch / name / "config.pbtxt").read_text())
               for name in (NAME, TEXT)}
    assert list(configs[NAME].version_policy.specific.versions) == [2]
    assert configs[TEXT].parameters["ID_MODEL_VERSION"].string_value == "2"
    assert (scratch / NAME / "2" / "model.onnx").read_bytes() == target.int8.path.read_bytes()
    assert (repo / NAME / "config.pbtxt").read_text() == before
    assert not (repo / NAME / "2").exists()
