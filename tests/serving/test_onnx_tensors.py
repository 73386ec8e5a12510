"""Stored tensors onnxruntime would refuse (`onnx_tensors`), as `package` and `check-repo` see
them: crafted with onnx.helper on the fixture model, and held against onnxruntime itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attndeploy.errors import RepositoryError
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.onnx_tensors import stored_tensors, tensor_problems
from attndeploy.serving.packaging.repository import PackageOptions, package_model

from .onnx_fixtures import build_model, save_model

HUGE = [2**31, 2**20]


def initializer(model: onnx.ModelProto, name: str) -> TensorProto:
    (tensor,) = [t for t in model.graph.initializer if t.name == name]
    return tensor


def huge_without_data(model: onnx.ModelProto) -> None:
    """The classifier weights declare 2^31 x 2^20 floats and hold nothing."""
    tensor = initializer(model, "classifier")
    tensor.ClearField("raw_data")
    tensor.dims[:] = HUGE


def huge_constant_in_a_function(model: onnx.ModelProto) -> None:
    """The MaskedSum function's first Constant declares 2^31 x 2^20 int64s over its 8 bytes."""
    model.functions[0].node[0].attribute[0].t.dims[:] = HUGE


def negative_dims(model: onnx.ModelProto) -> None:
    initializer(model, "bias").dims[:] = [-1, -3]


def truncated(model: onnx.ModelProto) -> None:
    tensor = initializer(model, "embedding")
    tensor.raw_data = tensor.raw_data[:-4]


def constant_in_the_graph(model: onnx.ModelProto) -> None:
    """A Constant node in the graph whose value declares more floats than it holds."""
    value = numpy_helper.from_array(np.zeros(4, np.float32))
    value.dims[:] = [4, 4]
    model.graph.node.insert(0, helper.make_node("Constant", [], ["spare"], value=value))


TAMPERED: dict[str, tuple[Callable[[onnx.ModelProto], None], str]] = {
    "huge without data": (huge_without_data, "'classifier' (initializer of the graph) declares "
                          "dims [2147483648, 1048576] of FLOAT (9007199254740992 bytes), more "
                          "than the whole file holds"),
    "huge constant in a function": (huge_constant_in_a_function,
                                    "unnamed tensor (attribute value of Constant node 'axis2' in "
                                    "function attndeploy::MaskedSum) declares dims "
                                    "[2147483648, 1048576] of INT64"),
    "negative dims": (negative_dims, "'bias' (initializer of the graph) declares dims [-1, -3] "
                      "of FLOAT, but a dim cannot be negative"),
    "truncated": (truncated, "'embedding' (initializer of the graph) declares dims [16, 8] of "
                  "FLOAT (512 bytes) but holds 508 bytes"),
    "constant in the graph": (constant_in_the_graph, "unnamed tensor (attribute value of "
                              "Constant node 'spare' "
                              "in the graph) declares dims [4, 4] of FLOAT (64 bytes) but holds "
                              "16 bytes"),
}


def tampered(tmp_path: Path, change: Callable[[onnx.ModelProto], None]) -> Path:
    model = build_model(custom_op=True)
    change(model)
    return save_model(model, tmp_path / "src" / "model.onnx")


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_package_refuses_a_tensor_onnxruntime_cannot_load(name: str, tmp_path: Path) -> None:
    change, fragment = TAMPERED[name]
    source = tampered(tmp_path, change)
    with pytest.raises(RepositoryError) as info:
        package_model(source, tmp_path / "repo", PackageOptions(name="cls"))
    message = str(info.value)
    assert message.startswith(f"{source}: ") and fragment in message, message
    assert "\n" not in message and "onnxruntime would refuse to load it" in message
    assert not (tmp_path / "repo" / "cls").exists()


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_check_repo_reports_a_tensor_onnxruntime_cannot_load(name: str, tmp_path: Path) -> None:
    change, fragment = TAMPERED[name]
    package_model(save_model(build_model(custom_op=True), tmp_path / "good.onnx"),
                  tmp_path / "repo", PackageOptions(name="cls"))
    served = tmp_path / "repo" / "cls" / "1" / "model.onnx"
    served.write_bytes(tampered(tmp_path, change).read_bytes())
    report = check_repository(tmp_path / "repo")
    assert not report
    (finding,) = report.errors
    assert finding.model == "cls" and finding.message.startswith(f"{served}: ")
    assert fragment in finding.message, finding.message


# --------------------------------------------------------------------------- external data


def external(tmp_path: Path, location: str = "weights.bin", data: bytes | None = None,
             **entries: str) -> Path:
    """A packaged repository whose served model keeps the embedding in `location` (written with
    `data`, by default the embedding's own bytes, unless `data` is b"" and the file absent)."""
    package_model(save_model(build_model(custom_op=True), tmp_path / "good.onnx"),
                  tmp_path / "repo", PackageOptions(name="cls"))
    served = tmp_path / "repo" / "cls" / "1" / "model.onnx"
    model = onnx.load(str(served))
    tensor = initializer(model, "embedding")
    raw = tensor.raw_data
    if data != b"":
        (served.parent / location).write_bytes(raw if data is None else data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, **entries}.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(served))
    return served


def errors(served: Path) -> list[str]:
    return [f.message for f in check_repository(served.parents[2]).errors]


def test_check_repo_accepts_external_data_beside_the_model(tmp_path: Path) -> None:
    served = external(tmp_path, length="512", offset="0")
    assert errors(served) == []
    assert tensor_problems(onnx.load(str(served), load_external_data=False), served) == []


@pytest.mark.parametrize(("case", "fragment"), [
    ({"data": b"\0" * 100}, "(512 bytes from offset 0) but 'weights.bin' holds 100 bytes"),
    ({"offset": "8"}, "(512 bytes from offset 8) but 'weights.bin' holds 512 bytes"),
    ({"length": "256"}, "(512 bytes) but its external length is 256 bytes"),
    ({"offset": "-8"}, "at an external offset of '-8', not a byte count"),
    ({"data": b""}, "in 'weights.bin', which is not a file beside model.onnx"),
    ({"location": "../weights.bin"}, "in '../weights.bin', outside the folder of model.onnx"),
    ({"location": "/etc/passwd", "data": b""}, "in '/etc/passwd', outside the folder of"),
    ({"location": "w" * 5_000, "data": b""}, "(5002 characters), which is not a file beside"),
    ({"location": "a\0b", "data": b""}, "in 'a\\x00b', which is not a file beside"),
])
def test_check_repo_reports_external_data_onnxruntime_cannot_read(
    case: dict, fragment: str, tmp_path: Path
) -> None:
    served = external(tmp_path, **case)
    (message,) = errors(served)
    assert message.startswith(f"{served}: tensor 'embedding' (initializer of the graph) "
                              "declares dims [16, 8] of FLOAT"), message
    assert fragment in message, message


def test_check_repo_reports_a_link_out_of_the_model_folder_as_outside(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.bin").write_bytes(b"\0" * 512)
    served = external(tmp_path, data=b"")
    (served.parent / "weights.bin").symlink_to(tmp_path / "elsewhere.bin")
    (message,) = errors(served)
    assert "in 'weights.bin', outside the folder of model.onnx" in message


def test_package_refuses_external_data_outside_the_model_folder(tmp_path: Path) -> None:
    model = build_model(custom_op=True)
    tensor = initializer(model, "embedding")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../../secret"
    source = save_model(model, tmp_path / "src" / "model.onnx")
    with pytest.raises(RepositoryError, match="outside the folder of model.onnx"):
        package_model(source, tmp_path / "repo", PackageOptions(name="cls"))


# --------------------------------------------------------------------------- against onnxruntime


def _typed(dims: list[int], data_type: int = TensorProto.FLOAT, **fields: list) -> TensorProto:
    tensor = TensorProto(name="w", data_type=data_type, dims=dims)
    for field, values in fields.items():
        getattr(tensor, field).extend(values)
    return tensor


def _raw(dims: list[int], raw: bytes, data_type: int = TensorProto.FLOAT) -> TensorProto:
    return TensorProto(name="w", data_type=data_type, dims=dims, raw_data=raw)


CRAFTED = {
    "raw exact": _raw([2, 3], bytes(24)),
    "raw short": _raw([2, 3], bytes(8)),
    "raw long": _raw([2], bytes(16)),
    "no data, no elements": _typed([0, 3]),
    "no data": _typed([2, 3]),
    "huge, no data": _typed(HUGE),
    "floats exact": _typed([2], float_data=[1.0, 2.0]),
    "floats short": _typed([2, 3], float_data=[1.0]),
    "bools exact": _typed([3], TensorProto.BOOL, int32_data=[1, 0, 1]),
    "halves short": _typed([3], TensorProto.FLOAT16, int32_data=[1, 0]),
    "int64 exact": _typed([2], TensorProto.INT64, int64_data=[1, 2]),
    "strings short": _typed([2], TensorProto.STRING, string_data=[b"a"]),
    "negative": _raw([-2, -2], bytes(16)),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_tensor_is_refused_exactly_when_onnxruntime_refuses_it(name: str,
                                                                 tmp_path: Path) -> None:
    import onnxruntime as ort

    tensor = CRAFTED[name]
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", tensor.data_type, None)],
                              initializer=[tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = save_model(model, tmp_path / "m.onnx")
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        loads = True
    except Exception:  # noqa: BLE001  (onnxruntime's own exception types)
        loads = False
    assert (not tensor_problems(model, path)) == loads


def test_every_fixture_model_holds_its_tensors_and_constants(tmp_path: Path) -> None:
    for options in ({}, {"custom_op": True}, {"gated": True}, {"head": "tagging"}):
        path = save_model(build_model(**options), tmp_path / "m.onnx")
        model = onnx.load(str(path))
        assert tensor_problems(model, path) == []
    places = {where for where, _ in stored_tensors(build_model(custom_op=True))}
    assert places == {"initializer of the graph",
                      "attribute value of Constant node 'axis2' in function attndeploy::MaskedSum",
                      "attribute value of Constant node 'axis1' in function attndeploy::MaskedSum"}
