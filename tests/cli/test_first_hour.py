"""What a new user meets in the first hour (issue #29): a file where a folder goes, a missing
source, an unknown variant, a host without a port, the running server's own port, results as
readable lines, a generic model given to predict, and a CPU-only torch install.

Commands run in process through `attndeploy.cli.app.main`, as in tests/cli/test_outputs.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from attndeploy.errors import ModelError, RepositoryError, ServerError
from attndeploy.runtime.metadata import REQUIRED, parse_metadata
from attndeploy.serving.client.protocol import Protocol, server_address
from attndeploy.serving.server.background import recorded_url
from attndeploy.serving.server.state import STATE_FORMAT, default_state_path
from attndeploy.variants.registry import variant_names
from tests.cli.test_outputs import run_main
from tests.serving.onnx_fixtures import build_model, save_model

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_KEYS = [key for key in REQUIRED if key != "attndeploy.version"]


def one_line_error(result, code: int, stage: str) -> str:
    """The one error line of a failed command, checked for its exit code and stage."""
    exit_code, _, err = result
    assert exit_code == code, (exit_code, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"error ({stage}): "), err[0]
    return err[0]


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    return save_model(build_model(custom_op=True), tmp_path / "src" / "cls.onnx")


# --------------------------------------------------------------------------- 1. --force


def test_an_existing_model_folder_names_the_flag_without_the_python_keyword(
    onnx_file: Path, tmp_path: Path
) -> None:
    from attndeploy.serving.packaging.repository import PackageOptions, package_model

    package_model(onnx_file, tmp_path / "repo", PackageOptions(name="cls"))
    with pytest.raises(RepositoryError) as info:
        package_model(onnx_file, tmp_path / "repo", PackageOptions(name="cls"))
    assert "already exist; pass --force to replace them" in str(info.value)
    assert "force=True" not in str(info.value)


# --------------------------------------------------------------------------- 2. info on a file


def test_info_on_an_onnx_file_says_what_info_reads_and_points_to_inspect(
    monkeypatch, capsys, onnx_file: Path
) -> None:
    line = one_line_error(run_main(monkeypatch, capsys, "info", onnx_file), 1, "checkpoint")
    assert f"{onnx_file} is a file; `attndeploy info` reads a checkpoint directory " \
           "(config.json + model.safetensors)" in line
    assert f"use `attndeploy inspect {onnx_file}`" in line
    assert "does not exist" not in line


def test_info_on_another_file_says_what_info_reads_without_the_inspect_hint(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text("{}")
    line = one_line_error(run_main(monkeypatch, capsys, "info", tmp_path / "config.json"), 1,
                          "checkpoint")
    assert "is a file; `attndeploy info` reads a checkpoint directory" in line
    assert "inspect" not in line


# --------------------------------------------------------------------------- 3. package


def test_package_of_a_missing_file_says_it_does_not_exist(monkeypatch, capsys, tmp_path):
    line = one_line_error(run_main(monkeypatch, capsys, "package", tmp_path / "missing.onnx",
                                   "--repo", tmp_path / "repo"), 1, "repository")
    assert f"{tmp_path / 'missing.onnx'} does not exist" in line


def test_package_checks_every_source_before_packaging_the_first(
    monkeypatch, capsys, tmp_path, onnx_file
):
    line = one_line_error(run_main(monkeypatch, capsys, "package", onnx_file,
                                   tmp_path / "missing.onnx", "--repo", tmp_path / "repo"),
                          1, "repository")
    assert "missing.onnx does not exist" in line
    assert not (tmp_path / "repo" / "cls").exists()


# --------------------------------------------------------------------------- 4. --variant


def test_an_unknown_variant_is_a_bad_option_listing_the_registered_ones(monkeypatch, capsys):
    line = one_line_error(run_main(monkeypatch, capsys, "train", "--variant", "foo"), 2,
                          "usage")
    assert (f"Invalid value for '--variant': unknown variant 'foo'; valid: "
            f"{', '.join(variant_names())}") in line
    assert "is not one of" not in line


def test_the_variants_stay_in_the_train_help(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "train", "--help")
    assert code == 0
    assert f"--variant [{'|'.join(variant_names())}]" in " ".join(out.split())


def test_the_variant_parser_takes_every_registered_name_and_the_enum_default():
    from attndeploy.cli.options import Variant, variant_name

    assert [variant_name(name) for name in variant_names()] == list(variant_names())
    assert variant_name(Variant.standard) == "standard"


# --------------------------------------------------------------------------- 5. loadtest options


@pytest.mark.parametrize("args, fragment", [
    (["--model", ""], "Invalid value for '--model': the model name is empty"),
    (["--model", "m", "--url", ""], "Invalid value for '--url': the server address is empty"),
    (["--model", "m", "--url", "http://127.0.0.1:8001"],
     "Invalid value for '--url': the server address 'http://127.0.0.1:8001' has a scheme"),
    (["--model", "m", "--url", "127.0.0.1:70000"], "has port '70000'"),
])
def test_bad_loadtest_values_are_bad_options(monkeypatch, capsys, args, fragment):
    line = one_line_error(run_main(monkeypatch, capsys, "loadtest", *args), 2, "usage")
    assert fragment in line and line.endswith("see 'attndeploy loadtest --help'")


# --------------------------------------------------------------------------- 6. addresses


@pytest.mark.parametrize("url, protocol, expected", [
    ("localhost", Protocol.GRPC, "localhost:8001"),
    ("localhost", Protocol.HTTP, "localhost:8000"),
    ("[::1]", "grpc", "[::1]:8001"),
    (" 10.0.0.2:9001 ", "http", "10.0.0.2:9001"),
    ("triton.example.com:8101", "grpc", "triton.example.com:8101"),
])
def test_a_host_alone_gets_the_protocol_s_default_port(url, protocol, expected):
    assert server_address(url, protocol) == expected


@pytest.mark.parametrize("url, protocol, fragment", [
    ("http://localhost:8000", "grpc", "has a scheme (http://); give host:port alone, e.g. "
                                      "localhost:8000, with --protocol http for HTTP"),
    ("http://localhost:8000/", "http", "give host:port alone, e.g. localhost:8000"),
    ("localhost:8001/v2", "grpc", "is not host:port"),
    ("localhost:http", "grpc", "has port 'http'"),
    ("::1", "grpc", "put it in brackets, e.g. [::1]:8001"),
])
def test_an_address_no_client_can_dial_is_refused(url, protocol, fragment):
    with pytest.raises(ServerError) as info:
        server_address(url, protocol)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_the_runner_dials_the_protocol_s_port_for_a_host_alone():
    from attndeploy.serving.client.triton import TritonRunner

    assert TritonRunner("localhost", "m").url == "localhost:8001"  # not gRPC's 443
    assert TritonRunner("localhost", "m", protocol="http").url == "localhost:8000"  # not 80
    assert TritonRunner(None, "m", protocol="http").url == "127.0.0.1:8000"
    with pytest.raises(ServerError, match="has a scheme"):
        TritonRunner("http://localhost:8000", "m")


# --------------------------------------------------------------------------- 7. recorded ports

PREFIX = "attndeploy_0123456789ab_"


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A live process that looks like the recorded tritonserver (its name and the
    shared-memory marker on its command line), as `background._is_our_server` checks."""
    binary = tmp_path / "bin" / "tritonserver"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    binary.chmod(0o755)
    process = subprocess.Popen(
        [str(binary), f"--backend-config=python,shm-region-prefix-name={PREFIX}"])
    yield process
    process.kill()
    process.wait()


def record(repo: Path, pid: int) -> None:
    repo.mkdir(exist_ok=True)
    default_state_path(repo).write_text(json.dumps({
        "format": STATE_FORMAT, "pid": pid, "host": "0.0.0.0", "grpc_port": 8101,
        "http_port": 8100, "grpc_url": "127.0.0.1:8101", "http_url": "127.0.0.1:8100",
        "repository_view": str(repo / "view"), "shm_prefix": PREFIX,
    }))


def test_the_recorded_url_is_the_running_server_s_port_per_protocol(tmp_path, fake_server):
    record(tmp_path / "repo", fake_server.pid)
    assert recorded_url(tmp_path / "repo", Protocol.GRPC) == "127.0.0.1:8101"
    assert recorded_url(tmp_path / "repo", "http") == "127.0.0.1:8100"


def test_no_recorded_url_without_a_record_or_a_running_server(tmp_path, fake_server):
    assert recorded_url(tmp_path / "nowhere", "grpc") is None
    (tmp_path / "foreign").mkdir()
    default_state_path(tmp_path / "foreign").write_text('{"pid": 1}')
    assert recorded_url(tmp_path / "foreign", "grpc") is None
    record(tmp_path / "repo", fake_server.pid)
    fake_server.kill()
    fake_server.wait()
    assert recorded_url(tmp_path / "repo", "grpc") is None


@pytest.fixture
def load_tests(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Replace the load tester: each call records its config and ends the command with an
    error (so that no report is printed)."""
    import attndeploy.serving.loadtest as loadtest_package
    from attndeploy.errors import LoadTestError

    configs: list[object] = []

    def fake(config, **kwargs):
        configs.append(config)
        raise LoadTestError("stopped by the test")

    monkeypatch.setattr(loadtest_package, "run_load_test", fake)
    return configs


@pytest.mark.parametrize("protocol, recorded, default", [
    ("grpc", "127.0.0.1:8101", "127.0.0.1:8001"), ("http", "127.0.0.1:8100", "127.0.0.1:8000")])
def test_loadtest_without_url_loads_the_server_recorded_for_the_repository(
    monkeypatch, capsys, tmp_path, fake_server, load_tests, protocol, recorded, default
):
    monkeypatch.chdir(tmp_path)
    args = ["loadtest", "--model", "m", "--protocol", protocol, "--repo", tmp_path / "repo",
            "--concurrency", "1"]
    one_line_error(run_main(monkeypatch, capsys, *args), 1, "loadtest")  # nothing recorded
    record(tmp_path / "repo", fake_server.pid)
    one_line_error(run_main(monkeypatch, capsys, *args), 1, "loadtest")
    one_line_error(run_main(monkeypatch, capsys, *args, "--url", "localhost"), 1, "loadtest")
    assert [config.url for config in load_tests] == [default, recorded,
                                                     f"localhost:{default[-4:]}"]


# --------------------------------------------------------------------------- 8. readable output


def test_a_mapping_prints_as_key_value_lines_nested_ones_indented():
    from attndeploy.cli.output import format_mapping

    assert format_mapping({"flips": 0, "margin": 0.125, "flip_margin": None, "ok": True,
                           "ids": [], "sub": {"a": [1, 2], "b": "x"}}) == [
        "  flips: 0", "  margin: 0.125", "  flip_margin: none", "  ok: true", "  ids: none",
        "  sub:", "    a: 1, 2", "    b: x"]


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A tiny untrained GA-Net checkpoint with a data record."""
    import torch

    from attndeploy.checkpoint import save_checkpoint
    from attndeploy.config import ModelConfig
    from attndeploy.models import build_model as build_torch_model

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=30, num_labels=2, variant="ganet", d_model=16, n_heads=2,
                         n_layers=1, d_ff=32, max_seq=16)
    return save_checkpoint(build_torch_model(config), tmp_path / "ckpt", label_names=("a", "b"),
                           data={"task": "sparse_evidence", "n_train": 48})


def test_info_prints_the_data_and_the_variant_config_as_lines(monkeypatch, capsys, checkpoint):
    code, out, err = run_main(monkeypatch, capsys, "info", checkpoint)
    assert code == 0, err
    lines = out.splitlines()
    assert "{" not in out and "'" not in out
    data = lines.index("  data:")
    assert lines[data + 1:data + 3] == ["    task: sparse_evidence", "    n_train: 48"]
    assert "  ganet:" in lines and "    gate_mode: threshold" in lines
    code, out, _ = run_main(monkeypatch, capsys, "info", checkpoint, "--json")
    assert code == 0 and json.loads(out)["data"] == {"task": "sparse_evidence", "n_train": 48}


def test_validate_prints_the_gate_summary_as_lines(monkeypatch, capsys, tmp_path):
    from attndeploy.validate import validator

    gates = {"flips": 1, "accepted_flips": 1, "refused_flips": 0, "flip_tolerance": 2,
             "margin": 0.25, "flip_margin": None, "compared": 40}
    report = SimpleNamespace(oracles={}, passed=True, gate_summary=lambda: gates,
                             to_json=lambda: {"gates": gates})
    monkeypatch.setattr(validator, "validate_model", lambda *args, **kwargs: report)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    code, out, err = run_main(monkeypatch, capsys, "validate", tmp_path / "ckpt",
                              tmp_path / "model.onnx")
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index("gates:")
    assert lines[start + 1:start + 8] == [
        "  flips: 1", "  accepted_flips: 1", "  refused_flips: 0", "  flip_tolerance: 2",
        "  margin: 0.25", "  flip_margin: none", "  compared: 40"]
    assert "{" not in out


# --------------------------------------------------------------------------- 9. generic models


def test_a_generic_model_is_told_apart_and_told_what_to_do():
    with pytest.raises(ModelError) as info:
        parse_metadata({"attndeploy.version": "0.1", "attndeploy.opset": "18"}, "mine.onnx",
                       outputs=["logits"])
    message = str(info.value)
    assert message.startswith("mine.onnx is an export of your own model (`export_model` or "
                              "`attndeploy export --factory`), not of a checkpoint: its metadata "
                              f"lacks {', '.join(CHECKPOINT_KEYS)}")
    assert "`attndeploy export CHECKPOINT --out model.onnx`" in message
    assert "`attndeploy validate --factory MODULE:FACTORY mine.onnx`" in message
    assert "onnxruntime" in message and "\n" not in message


def test_a_foreign_file_names_its_missing_keys_and_what_to_do():
    with pytest.raises(ModelError) as info:
        parse_metadata({}, "other.onnx", outputs=["logits"])
    message = str(info.value)
    assert message.startswith(f"other.onnx was not exported by attndeploy: its metadata lacks "
                              f"{', '.join(REQUIRED)}")
    assert "attndeploy export CHECKPOINT" in message and "attndeploy validate --factory" in message


def test_predict_on_a_generic_model_is_one_line_saying_what_to_do(
    monkeypatch, capsys, tmp_path
):
    generic = save_model(build_model(drop_metadata=CHECKPOINT_KEYS), tmp_path / "mine.onnx")
    line = one_line_error(run_main(monkeypatch, capsys, "predict", generic, "--text", "a"), 1,
                          "model")
    assert "is an export of your own model" in line and "attndeploy validate --factory" in line


# --------------------------------------------------------------------------- 10. Makefile


def make_dry_run(*variables: str) -> list[str]:
    """The commands `make venv` would run (`-n`: none runs), as lines."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    done = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), ".venv/.installed", *variables],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines()]


TORCH_INSTALL = re.compile(r'^\.venv/bin/python -m pip install "torch==[^"]+"(?P<rest>.*)$')


def torch_installs(*variables: str) -> list[str]:
    """What follows the pinned torch in each `pip install` of torch."""
    return [match["rest"] for match in map(TORCH_INSTALL.match, make_dry_run(*variables))
            if match]


def test_make_installs_torch_by_version_from_pip_s_own_index_by_default():
    assert torch_installs() == [""]


def test_make_takes_torch_from_torch_index_when_given():
    index = "https://download.pytorch.org/whl/cpu"
    assert torch_installs(f"TORCH_INDEX={index}") == [f" --index-url {index}"]


# --------------------------------------------------------------------------- 5. an ONNX file
# where a checkpoint folder is wanted, and the way back from a background server


@pytest.mark.parametrize("command", [("export", "--out", "again.onnx"), ("validate",)])
def test_export_and_validate_given_an_onnx_file_say_it_is_a_file_and_a_folder_is_wanted(
    monkeypatch, capsys, tmp_path: Path, onnx_file: Path, command: tuple[str, ...]
) -> None:
    name, *rest = command
    args = (name, onnx_file, *([onnx_file] if name == "validate" else []), *rest)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(run_main(monkeypatch, capsys, *args), 1, "checkpoint")
    assert f"{onnx_file} is a file; give a checkpoint folder" in line
    assert "the checkpoint folder it was exported from" in line
    assert "does not exist" not in line


def test_the_stop_hint_is_the_exact_command_for_the_repository_served() -> None:
    from attndeploy.cli.serve import stop_hint
    from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY

    assert stop_hint(Path(DEFAULT_REPOSITORY), None) == "attndeploy stop"
    assert stop_hint(Path("runs/my repo"), None) == "attndeploy stop --repo 'runs/my repo'"
    assert stop_hint(Path("runs/repo"), Path("s.json")) == "attndeploy stop --state-file s.json"


def test_stop_without_a_record_names_the_repo_option(monkeypatch, capsys, tmp_path: Path):
    line = one_line_error(run_main(monkeypatch, capsys, "stop", "--repo", tmp_path), 1,
                          "server")
    assert "No background server is recorded" in line and "--repo" in line
