"""check-repo on text models (`text_model_checks.py`): what it accepts, and each breakage it
names, for both ways a text model runs its id model."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.serving.packaging.check_repo import check_repository
from tests.serving.text_model_standin import (
    CALLS,
    VOCAB,
    call_of,
    copy_repo,
    packaged_repo,
    set_param,
)


@pytest.fixture(scope="module", params=CALLS)
def repo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packaged_repo(tmp_path_factory.mktemp(f"text_model_{request.param}"), request.param)


# --------------------------------------------------------------------------- check-repo


def test_check_repo_accepts_the_text_models(repo: Path) -> None:
    report = check_repository(repo)
    assert report.passed, report.summary()
    assert not report.warnings


BREAKAGES = {
    "edited model.py": (lambda r: (r / "gated_text/1/model.py").write_text(
        (r / "gated_text/1/model.py").read_text() + "# mine\n"), "edited by hand"),
    "changed runtime copy": (lambda r: (r / "gated_text/1/attndeploy/runtime/text.py")
                             .write_text("x = 1\n"), "differs from this attndeploy"),
    "missing runtime copy": (lambda r: (r / "gated_text/1/attndeploy/errors.py").unlink(),
                             "errors.py is missing"),
    "changed family runtime copy": (
        lambda r: (r / "gated_text/1/attndeploy/families/text_classification/runtime.py")
        .write_text("x = 1\n"), r"text_classification/runtime.py differs from this attndeploy"),
    "missing family runtime copy": (
        lambda r: (r / "gated_text/1/attndeploy/families/text_classification/runtime.py")
        .unlink(), r"text_classification/runtime.py is missing \(the decoder of the model's "),
    "another family's runtime named": (
        lambda r: (r / "gated_text/family_runtime.json").write_text(json.dumps(
            {"module": "attndeploy.families.token_classification.runtime",
             "path": "attndeploy/families/token_classification/runtime.py"})),
        r"family_runtime.json is missing or does not name "
        r"attndeploy.families.text_classification.runtime"),
    "missing id model": (lambda r: shutil.rmtree(r / "gated"), "id model 'gated'"),
    "id model name too long to exist": (
        lambda r: set_param(r / "gated_text", "ID_MODEL", "g" * 5_000),
        r"its id model 'g{199}\.\.\. \(5002 characters\) \(parameter ID_MODEL\) is not a model"),
    "other tokenizer": (lambda r: (r / "gated_text/tokenizer.json").write_text(
        json.dumps({"type": "word", "vocab": VOCAB[:-1]})), "tokenizer.json differs"),
    "tokenizer nested deep": (lambda r: (r / "gated_text/tokenizer.json").write_text(
        "[" * 100_000 + "]" * 100_000), r"tokenizer.json is missing or not JSON \(.*nests JSON"),
    "other labels": (lambda r: (r / "gated_text/labels.txt").write_text("a\nb\nc\n"),
                     "labels.txt differs"),
    "max_seq above the id model's": (lambda r: set_param(r / "gated_text", "MAX_SEQ", "99"),
                                     r"MAX_SEQ is '99'"),
    "an older prediction contract": (
        lambda r: set_param(r / "gated_text", "CONTRACT_VERSION", "1"),
        r"CONTRACT_VERSION is '1', this attndeploy answers prediction contract 2; re-package"),
    "other label names in the config": (
        lambda r: set_param(r / "gated_text", "LABEL_NAMES", '["x", "y", "z"]'),
        r"LABEL_NAMES differs from its id model's labels"),
    "text byte limit not a number": (
        lambda r: set_param(r / "gated_text", "MAX_TEXT_BYTES", "lots"),
        r"MAX_TEXT_BYTES is 'lots'; it must be a positive number of bytes"),
}


# what each way of running the id model needs (the other way does not need it)
CALL_BREAKAGES = {
    "onnxruntime": (lambda r: set_param(r / "gated_text", "ORT_THREADS", "0"),
                    r"ORT_THREADS is '0'; a text model that runs its id model's ONNX needs"),
    "bls": (lambda r: _set_max_batch(r / "gated_text", 16),
            r"max_batch_size 16 exceeds its id model's 8"),
}


def _set_max_batch(folder: Path, size: int) -> None:
    cfg = mc.ModelConfig()
    text_format.Parse((folder / "config.pbtxt").read_text(), cfg)
    cfg.max_batch_size = size
    (folder / "config.pbtxt").write_text(text_format.MessageToString(cfg))


def test_check_repo_holds_each_way_of_running_the_id_model_to_what_it_needs(
    repo: Path, tmp_path: Path
) -> None:
    call = call_of(repo, "gated")
    other = next(c for c in CALLS if c != call)
    for case, should_fail in ((call, True), (other, False)):
        broken = copy_repo(repo, tmp_path / case)
        CALL_BREAKAGES[case][0](broken)
        errors = [f.message for f in check_repository(broken).errors if f.model == "gated_text"]
        assert any(re.search(CALL_BREAKAGES[case][1], e) for e in errors) == should_fail, errors
    broken = copy_repo(repo, tmp_path / "unknown")
    set_param(broken / "gated_text", "ID_MODEL_CALL", "grpc")
    errors = [f.message for f in check_repository(broken).errors if f.model == "gated_text"]
    assert errors == ["parameter ID_MODEL_CALL is 'grpc'; it must be one of onnxruntime, bls "
                      "(re-package the model)"]


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_check_repo_names_what_is_wrong_with_a_text_model(repo: Path, tmp_path: Path,
                                                           case: str) -> None:
    broken = copy_repo(repo, tmp_path)
    breakage, message = BREAKAGES[case]
    breakage(broken)
    report = check_repository(broken)
    assert not report.passed
    errors = [f.message for f in report.errors if f.model == "gated_text"]
    assert any(re.search(message, e) for e in errors), report.summary()

