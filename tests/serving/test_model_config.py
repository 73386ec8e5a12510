"""The Triton config builder: golden `.pbtxt` files (compared as parsed ModelConfig messages) and
the rules every config follows (I/O from the interface, warm-up data, options)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import RepositoryError
from attndeploy.interface import model_interface
from attndeploy.serving.packaging.model_config import (
    LABELS_FILE,
    build_config,
    model_files,
    parse_config,
    serialize_config,
    warmup_data,
)
from attndeploy.serving.packaging.options import Flavor, Kind, PackageOptions

from .golden_cases import CASES, GOLDEN_DIR, info, render


def _parse(text: str) -> mc.ModelConfig:
    cfg = mc.ModelConfig()
    text_format.Parse(text, cfg)
    return cfg


@pytest.mark.parametrize("golden", sorted(CASES))
def test_config_equals_its_golden_file(golden: str) -> None:
    expected = _parse((GOLDEN_DIR / golden).read_text())
    built = _parse(render(golden))
    assert built == expected, (
        f"config differs from {golden}; if intended, run `python -m tests.serving.golden_cases`"
        f" and review the diff:\n{text_format.MessageToString(built)}"
    )


def test_every_golden_file_has_a_case() -> None:
    assert {p.name for p in GOLDEN_DIR.glob("*.pbtxt")} == set(CASES)


def test_serialized_config_round_trips_through_text_format() -> None:
    model_info, options, name, flavor = CASES["classifier_python.pbtxt"]
    cfg = build_config(model_info, options, name=name, flavor=flavor)
    assert parse_config(serialize_config(cfg)) == cfg


@pytest.mark.parametrize("flavor", [Flavor.PYTHON, Flavor.ONNXRUNTIME])
@pytest.mark.parametrize(
    ("variant", "head"), [("qvi", "classification"), ("ganet", "classification"),
                          ("evolving", "tagging")]
)
def test_io_blocks_derive_from_the_model_interface(flavor: Flavor, variant: str, head: str) -> None:
    model_info = info(variant, head, 4)
    cfg = build_config(model_info, PackageOptions(flavor=flavor), name="m", flavor=flavor)
    interface = model_interface(head=head, num_labels=4, gated=variant == "ganet")
    got = [(e.name, mc.DataType.Name(e.data_type), list(e.dims)) for e in (*cfg.input, *cfg.output)]
    want = [(s.name, s.triton_type, s.triton_dims) for s in (*interface.inputs, *interface.outputs)]
    assert got == want
    assert cfg.max_batch_size == 8
    assert all(e.allow_ragged_batch == (flavor is Flavor.PYTHON) for e in cfg.input)


def test_only_classifier_logits_point_at_the_labels_file() -> None:
    classifier = build_config(info("qvi", "classification", 3), PackageOptions(), name="c",
                              flavor=Flavor.PYTHON)
    tagger = build_config(info("qvi", "tagging", 3), PackageOptions(), name="t",
                          flavor=Flavor.PYTHON)
    assert classifier.output[0].label_filename == LABELS_FILE
    assert tagger.output[0].label_filename == ""


def test_warmup_mask_is_a_file_of_int64_ones_and_ids_are_zero_data() -> None:
    model_info = info("qvi", "classification", 3)
    options = PackageOptions()
    cfg = build_config(model_info, options, name="m", flavor=Flavor.PYTHON)
    (warmup,) = cfg.model_warmup
    assert warmup.batch_size == 1
    assert warmup.inputs["input_ids"].zero_data
    assert warmup.inputs["attention_mask"].input_data_file == "attention_mask"
    data = model_files(model_info, options)["warmup/attention_mask"]
    assert isinstance(data, bytes)
    np.testing.assert_array_equal(np.frombuffer(data, dtype=np.int64), np.ones(8, np.int64))


def test_warmup_is_shortened_to_a_lower_max_seq() -> None:
    cfg = build_config(info("qvi", "classification", 3), PackageOptions(max_seq=4), name="m",
                       flavor=Flavor.PYTHON)
    assert list(cfg.model_warmup[0].inputs["attention_mask"].dims) == [4]
    assert cfg.parameters["MAX_SEQ"].string_value == "4"
    assert len(warmup_data(4)["attention_mask"]) == 4 * 8


def test_max_seq_above_the_models_own_is_refused() -> None:
    with pytest.raises(RepositoryError, match="exceeds the model's own maximum of 32"):
        build_config(info("qvi", "classification", 3), PackageOptions(max_seq=64), name="m",
                     flavor=Flavor.PYTHON)


def test_gpu_kind_with_both_flavours_keeps_the_python_model_on_cpu() -> None:
    options = PackageOptions(flavor="both", kind="gpu")
    model_info = info("qvi", "classification", 3)
    python = build_config(model_info, options, name="a_python", flavor=Flavor.PYTHON)
    ort = build_config(model_info, options, name="a_onnxruntime", flavor=Flavor.ONNXRUNTIME)
    assert python.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert ort.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert options.model_name("a", Flavor.PYTHON) == "a_python"


def test_python_flavour_on_gpu_is_refused_with_the_alternative() -> None:
    with pytest.raises(RepositoryError, match="use flavor onnxruntime"):
        PackageOptions(flavor="python", kind="gpu")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flavor": "tensorrt"}, "valid: python, onnxruntime, both"),
        ({"kind": "tpu"}, "valid: cpu, gpu"),
        ({"max_batch_size": 0}, "max_batch_size must be an integer >= 1"),
        ({"instances": 0}, "instances"),
        ({"threads": 0}, "threads"),
        ({"name": "../evil"}, "must start with a letter or digit"),
        ({"max_queue_delay_us": -1}, "max_queue_delay_us"),
    ],
)
def test_bad_options_are_repository_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(RepositoryError, match=message):
        PackageOptions(**kwargs)  # type: ignore[arg-type]


def test_string_choices_become_enums() -> None:
    options = PackageOptions(flavor="onnxruntime", kind="gpu")
    assert options.flavor is Flavor.ONNXRUNTIME and options.kind is Kind.GPU


def test_a_config_that_does_not_parse_is_a_repository_error(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="does not parse as a Triton ModelConfig"):
        parse_config('name: "x"\nmax_batch_size: "eight"\n')
