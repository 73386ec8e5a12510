"""The load test's configuration: levels, validation, the default url, number lists, the vocab."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from attndeploy.errors import LoadTestError
from attndeploy.serving.loadtest import (
    LoadLevel,
    LoadTestConfig,
    parse_number_list,
    vocab_from_onnx,
)
from tests.serving.loadtest_fixtures import TINY_VOCAB, build_tiny_onnx


def test_concurrency_defaults_to_a_sweep_and_rates_switch_the_mode() -> None:
    assert [lv.label for lv in LoadTestConfig(model="m").levels] == [
        "concurrency 1", "concurrency 4", "concurrency 16"
    ]
    rate = LoadTestConfig(model="m", request_rates=50, distribution="poisson")
    assert rate.levels == (LoadLevel("request_rate", 50.0, "poisson"),)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": (1,), "request_rates": (5,)}, "not both"),
        ({"concurrency": (0,)}, "concurrency"),
        ({"distribution": "uniform"}, "distribution"),
        ({"seq_lengths": ()}, "seq_lengths"),
        ({"max_windows": 2}, "max_windows"),
        ({"check_fraction": 1.5}, "check_fraction"),
        ({"stability_threshold": 0.0}, "stability_threshold"),
        ({"onnx_path": Path("/no/such.onnx")}, "onnx_path"),
        ({"vocab_size": 2}, "vocab_size"),
        ({"model": ""}, "model is empty"),
        ({"protocol": "ftp"}, "protocol must be grpc or http"),
        ({"url": ""}, "url is empty"),
        ({"text_file": Path("/no/such.txt")}, "text_file"),
    ],
)
def test_invalid_configurations_say_what_is_wrong(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(LoadTestError, match=message):
        LoadTestConfig(**{"model": "m", **kwargs})


def test_the_url_defaults_to_the_protocol_s_loopback_port() -> None:
    assert LoadTestConfig(model="m").url == "127.0.0.1:8001"
    assert LoadTestConfig(model="m", protocol="http").url == "127.0.0.1:8000"
    assert LoadTestConfig(model="m", protocol="http", url="h:1").url == "h:1"


def test_number_lists_parse_for_the_command_line() -> None:
    assert parse_number_list("1, 4,16", "concurrency") == (1, 4, 16)
    assert parse_number_list("12.5", "rate", float) == (12.5,)
    with pytest.raises(LoadTestError, match="concurrency"):
        parse_number_list("1,x", "concurrency")


def test_vocab_comes_from_the_embedding_or_the_metadata(tmp_path: Path) -> None:
    path = build_tiny_onnx(tmp_path / "model.onnx")
    assert vocab_from_onnx(path) == TINY_VOCAB
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {"attndeploy.config": json.dumps({"vocab_size": 7})})
    onnx.save(model, str(path))
    assert vocab_from_onnx(path) == 7
