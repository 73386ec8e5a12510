"""What is tuned: the named model, the id model a text model calls, the int8 file."""

from __future__ import annotations

import shutil

import pytest

from attndeploy.errors import RepositoryError
from attndeploy.serving.tune.target import read_target
from tests.serving.onnx_fixtures import build_model, save_model
from tests.serving.tune.fixtures import NAME, TEXT, int8_copy, tiny_repo


def test_a_text_model_is_tuned_with_the_id_model_it_calls(tmp_path):
    repo = tiny_repo(tmp_path)
    target = read_target(repo, TEXT)
    assert (target.model, target.id_model, target.text_model) == (TEXT, NAME, TEXT)
    assert target.models == [TEXT, NAME]
    assert target.onnx_path == repo / NAME / "1" / "model.onnx"
    assert target.next_version == 2


def test_an_id_model_is_tuned_alone(tmp_path):
    target = read_target(tiny_repo(tmp_path), NAME)
    assert target.text_model is None and target.models == [NAME]


def test_a_model_not_in_the_repository_is_named_with_what_the_repository_holds(tmp_path):
    with pytest.raises(RepositoryError, match="no model 'other' in .*; it holds tiny, tiny_text"):
        read_target(tiny_repo(tmp_path), "other")


def test_an_onnxruntime_flavour_model_is_refused_with_what_to_tune_instead(tmp_path):
    repo = tiny_repo(tmp_path, text=False, flavor="both")
    with pytest.raises(RepositoryError, match="serves only the python flavour"):
        read_target(repo, f"{NAME}_onnxruntime")
    assert read_target(repo, f"{NAME}_python").id_model == f"{NAME}_python"


def test_a_text_model_whose_id_model_is_gone_is_refused(tmp_path):
    repo = tiny_repo(tmp_path)
    shutil.rmtree(repo / NAME)
    with pytest.raises(RepositoryError, match="calls the id model 'tiny', which is not in"):
        read_target(repo, TEXT)


def test_an_int8_model_is_read_with_its_quantization_record(tmp_path):
    repo = tiny_repo(tmp_path)
    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / "tiny.int8.onnx")
    target = read_target(repo, TEXT, int8)
    assert target.int8 is not None
    assert target.int8.quantization == '{"method": "dynamic", "activations": "per-batch"}'
    assert target.onnx_for("int8") == int8


def test_an_int8_model_with_other_outputs_or_the_served_file_itself_is_refused(tmp_path):
    repo = tiny_repo(tmp_path)
    gated = save_model(build_model(gated=True), tmp_path / "gated.onnx")
    with pytest.raises(RepositoryError, match="does not have the served model's outputs"):
        read_target(repo, TEXT, gated)
    with pytest.raises(RepositoryError, match="is the served model itself"):
        read_target(repo, TEXT, repo / NAME / "1" / "model.onnx")
    with pytest.raises(RepositoryError, match="is not a file"):
        read_target(repo, TEXT, tmp_path / "missing.onnx")
