"""Every CLI default is the library's: the value an option falls back to (and the [default: ...]
its help shows) equals the default of the dataclass field or parameter it is passed to."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from attndeploy.cli.app import app
from attndeploy.cli.defaults import field_default, number_list, parameter_default
from attndeploy.config import ModelConfig
from attndeploy.deploy.options import KubernetesOptions
from attndeploy.quickstart.options import QuickstartOptions
from attndeploy.runtime.model import InferenceModel
from attndeploy.serving.client.infer import infer_request
from attndeploy.serving.loadtest import LoadTestConfig
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY, PackageOptions
from attndeploy.serving.server import TritonServer, start_background
from attndeploy.training.config import REAL_TEXT_DEFAULTS, TASK_DEFAULTS, TrainConfig
from attndeploy.training.data import load_training_data
from attndeploy.variants.evolving.config import EvolvingConfig
from attndeploy.variants.ganet.config import GANetConfig
from attndeploy.variants.qvi.config import QVIConfig


def _config(name: str) -> Any:
    return field_default(LoadTestConfig, name)


def _server(name: str) -> Any:
    return parameter_default(TritonServer.__init__, name)


# command -> {CLI parameter: the library's default it must equal}
LIBRARY_DEFAULTS: dict[str, dict[str, Any]] = {
    "loadtest": {
        "protocol": _config("protocol"), "distribution": _config("distribution"),
        "batch_size": _config("batch"), "seq": number_list(_config("seq_lengths")),
        "window": _config("window_s"), "stability": _config("stability_threshold"),
        "max_windows": _config("max_windows"), "warmup_requests": _config("warmup_requests"),
        "check_fraction": _config("check_fraction"), "seed": _config("seed"),
    },
    "serve": {
        "grpc_port": _server("grpc_port"), "http_port": _server("http_port"),
        "metrics_port": _server("metrics_port"), "host": _server("host"),
        "ready_timeout": _server("ready_timeout_s"), "guard": _server("guard"),
    },
    "infer": {"timeout": parameter_default(infer_request, "timeout_s")},
    "deploy": {
        name: field_default(KubernetesOptions, name)
        for name in ("kserve", "image", "gpu", "name", "cpu", "memory", "target_cpu")
    },
    "quickstart": {
        name: field_default(QuickstartOptions, name)
        for name in ("workdir", "repo", "steps", "serve")
    },
    "predict": {"batch_size": parameter_default(InferenceModel.predict, "batch_size")},
    "train": {
        "max_seq": None,  # ModelConfig's max_seq, or a --hf-model decoder's own context: the
        # parse fills it in (test_max_seq_left_out_is_the_model_config_s below)
        **{name: field_default(TrainConfig, name) for name in ("batch_size", "eval_every", "seed")},
        "n_train": parameter_default(load_training_data, "n_train"),
        "n_eval": parameter_default(load_training_data, "n_eval"),
        "eval_fraction": parameter_default(load_training_data, "eval_fraction"),
        "qvi_form": field_default(QVIConfig, "form"),
        **{name: field_default(GANetConfig, name)
           for name in ("density_weight", "gate_mode", "straight_through")},
        "temperature": None,  # depends on what is trained (the preset's, see train --help)
        "negative_slope": field_default(EvolvingConfig, "negative_slope"),
        # alpha and beta depend on what is trained (None: the preset's, see train --help)
        "alpha": None, "beta": None,
    },
    "package": {
        **{name: field_default(PackageOptions, name)
           for name in ("flavor", "version", "max_batch_size", "instances", "kind",
                        "dynamic_batching", "max_queue_delay_us", "warmup", "threads",
                        "text_instances", "force")},
        "text_model": field_default(PackageOptions, "text"),
        "truncate": field_default(PackageOptions, "truncate_text"),
    },
}


def _cli_defaults(command: str) -> dict[str, Any]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {p.name: getattr(p.default, "value", p.default) for p in click_command.params}


@pytest.mark.parametrize("command", sorted(LIBRARY_DEFAULTS))
def test_cli_defaults_are_the_library_defaults(command: str) -> None:
    cli = _cli_defaults(command)
    expected = {name: getattr(value, "value", value)
                for name, value in LIBRARY_DEFAULTS[command].items()}
    assert {name: cli[name] for name in expected} == expected


def test_serve_background_waits_as_long_as_the_foreground_server() -> None:
    """`serve --ready-timeout` feeds both; their defaults must agree for the option's one
    default."""
    for name in ("grpc_port", "http_port", "metrics_port", "host", "guard"):
        assert parameter_default(start_background, name) == _server(name)
    assert parameter_default(start_background, "timeout_s") == _server("ready_timeout_s")


def test_the_train_help_shows_each_kind_of_data_its_gates_word_dropout_refit_and_distill(
) -> None:
    """`--aux`, `--relaxation`, `--word-dropout`, `--refit` and `--distill` have no single
    default: a task and --data take their presets' values, and GA-Net on --data its own word
    dropout and distillation."""
    from typer.testing import CliRunner

    help_text = " ".join(CliRunner().invoke(app, ["train", "--help"]).output.split())
    for name in ("aux", "relaxation"):
        assert _cli_defaults("train")[name] is None
        task = TASK_DEFAULTS.ganet.get(name, field_default(GANetConfig, name))
        data = REAL_TEXT_DEFAULTS.ganet.get(name, field_default(GANetConfig, name))
        assert f"[default: {task} for a task; {data} for --data]" in help_text
    assert _cli_defaults("train")["word_dropout"] is None
    assert (f"[default: {TASK_DEFAULTS.training.word_dropout:g} for a task; "
            f"{REAL_TEXT_DEFAULTS.training.word_dropout:g} for --data, "
            f"{REAL_TEXT_DEFAULTS.training_for('ganet').word_dropout:g} for GA-Net on --data"
            ) in help_text
    assert _cli_defaults("train")["refit"] is None
    assert (f"[default: {TASK_DEFAULTS.training.refit} for a task; "
            f"{REAL_TEXT_DEFAULTS.training.refit} for --data]") in help_text
    assert _cli_defaults("train")["distill"] is None  # GA-Net's own: a task's 0, --data's 0.5
    assert (f"[default: {TASK_DEFAULTS.training_for('ganet').distill:g} for a task; "
            f"{REAL_TEXT_DEFAULTS.training_for('ganet').distill:g} for --data]") in help_text


def test_the_loadtest_help_shows_the_library_defaults() -> None:
    from typer.testing import CliRunner

    help_text = " ".join(CliRunner().invoke(app, ["loadtest", "--help"]).output.split())
    assert f"[default: {number_list(LoadTestConfig(model='m').concurrency)} unless" in help_text
    assert f"[default: {_config('window_s')}]" in help_text


@pytest.mark.parametrize("command", ["package", "serve", "stop", "infer", "loadtest",
                                     "check-repo", "deploy", "quickstart"])
def test_every_repository_option_defaults_to_the_library_s_repository(command: str) -> None:
    assert _cli_defaults(command)["repo"] == DEFAULT_REPOSITORY


def test_max_seq_left_out_is_the_model_config_s() -> None:
    """--max-seq defaults to None so that a given 128 can be told from none; the parsed model
    then carries ModelConfig's default, and the help shows it."""
    from attndeploy.cli.args.model import ModelArgs

    values = {"variant": "standard", "architecture": type("A", (), {"value": "transformer"})(),
              "max_seq": None, **{name: None for name in ("d_model", "heads", "layers", "d_ff",
                                                          "dropout", "head", "char_cnn",
                                                          "attention", "ganet_budget")}}
    parsed = ModelArgs().parse(values)
    assert parsed.max_seq == field_default(ModelConfig, "max_seq") and not parsed.max_seq_given
    assert ModelArgs().parse({**values, "max_seq": 128}).max_seq_given
    help_text = next(p.help for p in typer.main.get_command(app).commands["train"].params
                     if p.name == "max_seq")
    assert f"[default: {field_default(ModelConfig, 'max_seq')};" in help_text
