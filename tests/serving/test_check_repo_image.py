"""check-repo and the server's Python: a text model whose tokenizer needs a package (`tokenizers`
for WordPiece) that this Python lacks is a warning, since `attndeploy serve` runs this Python in
its python backend and would fail to load the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attndeploy.serving.packaging.check_repo import check_repository, text_model_requirement
from tests.deploy.wordpiece_repo import package_wordpiece_model

from .onnx_fixtures import build_model, fixture_vocab, save_model


@pytest.fixture(scope="module")
def wordpiece_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("wordpiece")
    return package_wordpiece_model(root, root / "repo")


def tokenizer_warnings(repo: Path) -> list[tuple[str, str]]:
    return [(f.model, f.message) for f in check_repository(repo).warnings
            if "tokenizer needs the Python package" in f.message]


def test_a_wordpiece_text_model_needs_tokenizers(wordpiece_repo: Path) -> None:
    assert text_model_requirement(wordpiece_repo / "words_text") == ("wordpiece", "tokenizers")
    assert text_model_requirement(wordpiece_repo / "words") is None  # the id model: no tokenizer


def test_a_word_tokenizer_text_model_needs_no_package(tmp_path: Path) -> None:
    from attndeploy.serving.packaging.repository import PackageOptions, package_model

    source = save_model(build_model(vocab=fixture_vocab(16)), tmp_path / "src" / "w.onnx")
    package_model(source, tmp_path / "repo", PackageOptions(name="w"))
    assert text_model_requirement(tmp_path / "repo" / "w_text") is None
    assert tokenizer_warnings(tmp_path / "repo") == []


def test_check_repo_is_silent_when_this_python_has_tokenizers(wordpiece_repo: Path) -> None:
    report = check_repository(wordpiece_repo)
    assert report.passed and tokenizer_warnings(wordpiece_repo) == []


def test_check_repo_warns_when_this_python_lacks_tokenizers(
    wordpiece_repo: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if it were not installed
    report = check_repository(wordpiece_repo)
    assert report.passed  # a warning: the repository is right, this Python cannot serve it
    ((model, message),) = tokenizer_warnings(wordpiece_repo)
    assert model == "words_text"
    assert message.startswith("its wordpiece tokenizer needs the Python package 'tokenizers', "
                              f"which this Python ({sys.executable}) cannot import")
    assert "pip install tokenizers" in message


def test_check_repo_json_carries_the_warning(wordpiece_repo: Path, tmp_path: Path) -> None:
    """`attndeploy check-repo --json` in a Python that cannot import `tokenizers`: the warning
    is a finding of the JSON report, and the check still passes (exit 0)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "tokenizers.py").write_text("raise ImportError('tokenizers is not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(blocker), str(Path(__file__).resolve().parents[2])])}
    result = subprocess.run([sys.executable, "-m", "attndeploy", "check-repo", str(wordpiece_repo),
                             "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (finding,) = [f for f in report["findings"] if "tokenizers" in f["message"]]
    assert (finding["model"], finding["severity"]) == ("words_text", "warning")
