"""THE table of bad inputs: what a careless or hostile user gives the CLI, and what must follow.

Every case runs `attndeploy ...` in process and must end with

- the expected exit code (2 for a bad option, 1 for everything else), never a traceback;
- exactly one line on stderr, `error (<stage>): ...`, holding the expected fragment;
- nothing written, changed or removed: every file of the shared work folder (checkpoint, ONNX
  model, model repository) and of the case's own folder is byte for byte as before, and no
  temporary is left behind.

Add a case whenever a new way in is found. Paths are templates: `{ckpt}` a tiny trained
checkpoint, `{onnx}` its export, `{repo}` a packaged repository, `{tmp}` the case's own folder
(where `prepare` lays out what the case needs), `{port}` a port where nothing listens,
`{grpc_port}` a gRPC server with no service and `{http_port}` a plain HTTP/1 server (the wrong
protocol's port). A case may replace stdin (`stdin`: bytes to read, or CLOSED). Bad
requests to the served model are tabled beside their code, in
`tests/serving/test_model_py.py` (`BAD_REQUESTS`, the generated model.py) and
`tests/serving/test_python_backend.py` (`BAD_REQUESTS`, over gRPC to a real server).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attndeploy.cli import app as cli_app
from attndeploy.cli import predict as predict_cli
from attndeploy.serving.server import free_port

TINY = ["--d-model", "16", "--heads", "2", "--layers", "2", "--d-ff", "32", "--steps", "2",
        "--batch-size", "8", "--dataset", "sparse_evidence", "--n-train", "16", "--n-eval", "8",
        "--max-seq", "32"]


CLOSED = "closed"  # a `stdin` of a case: the command starts with stdin closed (`<&-`)


@dataclass(frozen=True)
class BadInput:
    argv: tuple[str, ...]
    stage: str  # "usage" for exit 2, else the error's stage with exit 1
    fragment: str  # a piece of the message (case-insensitive)
    prepare: Callable[[Path, Path], None] | None = None  # (case folder, work folder)
    stdin: bytes | str | None = None  # bytes to read, CLOSED, or None: pytest's own

    @property
    def exit_code(self) -> int:
        return 2 if self.stage == "usage" else 1


def case(*argv: str, stage: str, fragment: str, prepare=None, stdin=None) -> BadInput:
    return BadInput(tuple(argv), stage, fragment, prepare, stdin)


# --------------------------------------------------------------------------- preparations


def _write(relative: str, content: str | bytes) -> Callable[[Path, Path], None]:
    def prepare(tmp: Path, work: Path) -> None:
        target = tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)

    return prepare


def _dangling(relative: str) -> Callable[[Path, Path], None]:
    """A symbolic link {tmp}/`relative` to {tmp}/nowhere, which does not exist."""

    def prepare(tmp: Path, work: Path) -> None:
        link = tmp / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(tmp / "nowhere")

    return prepare


def _copy_checkpoint(edit: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    """A copy of the trained checkpoint at {tmp}/ckpt, then `edit` applied to it."""

    def prepare(tmp: Path, work: Path) -> None:
        shutil.copytree(work / "ckpt", tmp / "ckpt")
        edit(tmp / "ckpt")

    return prepare


def _edit_config(**model_changes: object) -> Callable[[Path], None]:
    def edit(ckpt: Path) -> None:
        config = json.loads((ckpt / "config.json").read_text())
        config["model"].update(model_changes)
        (ckpt / "config.json").write_text(json.dumps(config))

    return edit


def _set_data(**data: object) -> Callable[[Path], None]:
    """Replace the checkpoint's `data` entry (what it trained on; editable, not the model)."""

    def edit(ckpt: Path) -> None:
        config = json.loads((ckpt / "config.json").read_text())
        config["data"] = data
        (ckpt / "config.json").write_text(json.dumps(config))

    return edit


def _truncate_weights(ckpt: Path) -> None:
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])


def _flip_weight_byte(ckpt: Path) -> None:
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (ckpt / "model.safetensors").write_bytes(bytes(data))


def _staging_folder(tmp: Path, work: Path) -> None:
    shutil.copytree(work / "repo", tmp / "repo")
    staging = tmp / "repo" / ".standard.999999.abcd.tmp"
    shutil.copytree(tmp / "repo" / "standard", staging)


def _empty_repo(tmp: Path, work: Path) -> None:
    (tmp / "repo").mkdir()


def _foreign_onnx(tmp: Path, work: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), tmp / "foreign.onnx")


def _string_input_onnx(tmp: Path, work: Path) -> None:
    """{tmp}/strings.onnx: a model whose input is a string tensor."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["y"])], "g",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [1])],
    )
    onnx.save(helper.make_model(graph), tmp / "strings.onnx")


def _tampered_onnx(tmp: Path, work: Path) -> None:
    """{tmp}/tampered.onnx: the export, its largest weight declaring 2^31 x 2^20 over no data."""
    import onnx

    model = onnx.load(work / "model.onnx")
    tensor = max(model.graph.initializer, key=lambda t: len(t.raw_data))
    tensor.ClearField("raw_data")
    tensor.dims[:] = [2**31, 2**20]
    onnx.save(model, tmp / "tampered.onnx")


def _copied_repo(tmp: Path, work: Path) -> Path:
    shutil.copytree(work / "repo", tmp / "repo")
    return tmp / "repo"


def _server_log_link(tmp: Path, work: Path) -> None:
    """A link where `serve --background` writes its log, to a file of someone else's."""
    (tmp / "victim").write_text("not the server's\n")
    (_copied_repo(tmp, work) / ".attndeploy-server.log").symlink_to(tmp / "victim")


def _tampered_served_model(tmp: Path, work: Path) -> None:
    repo = _copied_repo(tmp, work)
    _tampered_onnx(tmp, work)
    shutil.copyfile(tmp / "tampered.onnx", repo / "standard" / "1" / "model.onnx")


def _junk_config_line(tmp: Path, work: Path) -> None:
    config = _copied_repo(tmp, work) / "standard" / "config.pbtxt"
    config.write_text(config.read_text() + "x" * 600_000 + "\n")


def _hf_model(weights: bytes, name: str = "model.safetensors") -> Callable[[Path, Path], None]:
    """A `save_pretrained` folder {tmp}/bert: a tiny BERT config and `weights` as `name`."""

    def prepare(tmp: Path, work: Path) -> None:
        config = {"model_type": "bert", "hidden_size": 16, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "intermediate_size": 32,
                  "max_position_embeddings": 40, "vocab_size": 100}
        _write("bert/config.json", json.dumps(config))(tmp, work)
        _write(f"bert/{name}", weights)(tmp, work)

    return prepare


def _hf_config(**changes: object) -> Callable[[Path, Path], None]:
    """A `save_pretrained` folder {tmp}/bert holding a config alone: a tiny BERT's, changed."""

    def prepare(tmp: Path, work: Path) -> None:
        config = {"model_type": "bert", "hidden_size": 16, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "intermediate_size": 32,
                  "max_position_embeddings": 40, "vocab_size": 100, **changes}
        _write("bert/config.json", json.dumps(config))(tmp, work)

    return prepare


def _trained_on(data: bytes) -> Callable[[Path, Path], None]:
    """{tmp}/d.jsonl holding `data`, and a copy of the checkpoint at {tmp}/ckpt that records it
    as the file it trained on."""

    def prepare(tmp: Path, work: Path) -> None:
        _write("d.jsonl", data)(tmp, work)
        _copy_checkpoint(_set_data(data_file=str(tmp / "d.jsonl"), eval_fraction=0.5,
                                   seed=0))(tmp, work)

    return prepare


DEEP = "[" * 100_000 + "]" * 100_000  # JSON nested 100,000 levels deep


def _deep_config(ckpt: Path) -> None:
    """config.json with a note nested DEEP (the notes are editable: no digest covers them)."""
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(config)[:-1] + f', "metrics": {DEEP}}}')


def _deep_tokenizer_metadata(tmp: Path, work: Path) -> None:
    """{tmp}/deep.onnx: the export, with its `attndeploy.tokenizer` metadata nested DEEP."""
    import onnx

    model = onnx.load(str(work / "model.onnx"))
    for prop in model.metadata_props:
        if prop.key == "attndeploy.tokenizer":
            prop.value = '{"type": "word", "vocab": ' + DEEP + "}"
    onnx.save(model, str(tmp / "deep.onnx"))


def _image_export(tmp: Path, work: Path) -> None:
    """A tiny trained ViT checkpoint `ckpt_vit_standard_0` and its export `vit_standard_0.onnx`."""
    from tests.families.image_classification.images import image_export, write_folder

    write_folder(tmp / "images", per_class=2)
    image_export(tmp / "images", tmp, "vit", "standard")


def _safetensors(header: bytes, claimed: int | None = None) -> bytes:
    """A safetensors file: the header's length (or `claimed`), then the header."""
    return (len(header) if claimed is None else claimed).to_bytes(8, "little") + header


LONG = "n" * 300
# One line of 1 MiB, over every limit of a line (a text: 64 KiB; a JSONL line: 448 KiB), after a
# good first line; every reader refuses it naming line 2, without reading it whole
# (tests/long_lines.py measures that).
LONG_LINE = b"w1\n" + b"w" * (1 << 20) + b"\n"
LONG_JSONL = b'{"text": "a b", "label": "x"}\n{"text": "' + b"w" * (1 << 20) + b'"}\n'
LATE = predict_cli.CHUNK_TEXTS + 2  # a line of the second chunk of `predict --file`
JSONL_OK = '{"text": "a b", "label": "x"}\n{"text": "c d", "label": "y"}\n' * 4

CASES: dict[str, BadInput] = {
    # ---- train: options and data
    "train unknown variant": case("train", "--variant", "flash", stage="usage",
                                  fragment="unknown variant 'flash'; valid:"),
    "train unknown task": case("train", "--dataset", "nope", "--out", "{tmp}/o", stage="data",
                               fragment="nope"),
    "train both task and data": case("train", "--dataset", "sparse_evidence", "--data", "{tmp}/d",
                                     "--out", "{tmp}/o", stage="config", fragment="not both",
                                     prepare=_write("d", JSONL_OK)),
    "train missing data file": case("train", "--data", "{tmp}/absent.jsonl", "--out",
                                    "{tmp}/o", stage="data", fragment="absent.jsonl"),
    "train data not json": case("train", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/o",
                                stage="data", fragment="d.jsonl:1",
                                prepare=_write("d.jsonl", "not json\n")),
    "train data empty": case("train", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/o",
                             stage="data", fragment="d.jsonl", prepare=_write("d.jsonl", "")),
    # a first line with a label makes a text-classification file (text alone: text-generation)
    "train data without label": case("train", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/o",
                                     stage="data", fragment="missing 'label'",
                                     prepare=_write("d.jsonl", '{"text": "a", "label": "x"}\n'
                                                               '{"text": "a b"}\n')),
    "train language model on one text": case(
        "train", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/o", stage="data",
        fragment="a language model needs at least 2 texts",
        prepare=_write("d.jsonl", '{"text": "a b"}\n')),
    "train data not utf-8": case("train", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/o",
                                 stage="data", fragment="d.jsonl",
                                 prepare=_write("d.jsonl", b'{"text": "\xff\xfe", "label": 1}\n')),
    "train data line over the limit": case(
        "train", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/o", stage="data",
        fragment="line 2 of {tmp}/d.jsonl has more than 458752 bytes, the limit per JSONL line",
        prepare=_write("d.jsonl", LONG_JSONL)),
    "train no-attention on text": case("train", *TINY, "--no-attention", "--out", "{tmp}/m",
                                       stage="config", fragment="applies to image models"),
    "train ganet-budget on text": case("train", *TINY, "--variant", "ganet", "--ganet-budget",
                                       "0.3", "--out", "{tmp}/m", stage="config",
                                       fragment="applies to GA-Net image models"),
    "train zero steps": case("train", *TINY, "--steps", "0", "--out", "{tmp}/o",
                             stage="config", fragment="steps"),
    "train heads do not divide width": case("train", *TINY, "--heads", "3", "--out", "{tmp}/o",
                                            stage="config", fragment="heads"),
    "train zero max seq": case("train", *TINY, "--max-seq", "0", "--out", "{tmp}/o",
                               stage="config", fragment="max_seq"),
    "train eval fraction above one": case("train", "--data", "{tmp}/d.jsonl",
                                          "--eval-fraction", "1.5", "--out", "{tmp}/o",
                                          stage="data", fragment="fraction",
                                          prepare=_write("d.jsonl", JSONL_OK)),
    "train negative lr": case("train", *TINY, "--lr", "-1", "--out", "{tmp}/o",
                              stage="config", fragment="learning rate"),
    "train zero batch": case("train", *TINY, "--batch-size", "0", "--out", "{tmp}/o",
                             stage="usage", fragment="--batch-size"),
    "train existing output": case("train", *TINY, "--out", "{ckpt}", stage="checkpoint",
                                  fragment="--force"),
    "train output is a file": case("train", *TINY, "--out", "{tmp}/f", stage="output",
                                   fragment="is a file", prepare=_write("f", "x")),
    "train output unwritable": case("train", *TINY, "--out", "/proc/attndeploy-o",
                                    stage="output", fragment="cannot write"),
    "train bad temperature": case("train", *TINY, "--variant", "ganet", "--temperature", "0",
                                  "--out", "{tmp}/o", stage="config", fragment="temperature"),
    "train bad alpha": case("train", *TINY, "--variant", "evolving", "--alpha", "2",
                            "--out", "{tmp}/o", stage="config", fragment="alpha"),
    # ---- train --hf-model: the weights' safetensors header
    "train hf weights header not json": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/o",
        stage="checkpoint", fragment="bert/model.safetensors is corrupt",
        prepare=_hf_model(_safetensors(b"{not json at all!!!}"))),
    "train hf weights header too large": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/o",
        stage="checkpoint", fragment="bert/model.safetensors is corrupt: its header claims",
        prepare=_hf_model(_safetensors(b"{}", claimed=1 << 40))),
    "train hf weights index not json": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/o",
        stage="checkpoint", fragment="model.safetensors.index.json is not a safetensors index",
        prepare=_hf_model(b"{", name="model.safetensors.index.json")),
    # ---- train --hf-model: the folder's config.json, checked before any model is built
    "train hf config huge width": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/o",
        stage="config", fragment="bert/config.json: hidden_size is 1,000,000,000, above the "
        "limit of 65,536", prepare=_hf_config(hidden_size=10**9)),
    "train hf config no heads": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/o",
        stage="config", fragment="num_attention_heads must be at least 1, got 0",
        prepare=_hf_config(num_attention_heads=0)),
    "train hf config a million layers": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/o",
        stage="config", fragment="num_hidden_layers is 1,000,000, above the limit of 1,024",
        prepare=_hf_config(num_hidden_layers=10**6)),
    # ---- checkpoints: missing, corrupt, tampered
    "info missing checkpoint": case("info", "{tmp}/absent", stage="checkpoint",
                                    fragment="absent"),
    "info on a file": case("info", "{tmp}/f", stage="checkpoint", fragment="f",
                           prepare=_write("f", "x")),
    "info config not json": case("info", "{tmp}/c", stage="checkpoint", fragment="config.json",
                                 prepare=_write("c/config.json", "{not json")),
    "info config of another format": case("info", "{tmp}/c", stage="checkpoint",
                                          fragment="not an attndeploy checkpoint",
                                          prepare=_write("c/config.json", '{"format": "x"}')),
    "info config nested deep": case("info", "{tmp}/ckpt", stage="checkpoint",
                                    fragment="config.json nests JSON more than 64 levels deep",
                                    prepare=_copy_checkpoint(_deep_config)),
    "export config nested deep": case("export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx",
                                      stage="checkpoint",
                                      fragment="config.json nests JSON more than 64 levels deep",
                                      prepare=_copy_checkpoint(_deep_config)),
    "export unknown variant in config": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="variant", prepare=_copy_checkpoint(_edit_config(variant="flash"))),
    "export tampered huge vocab": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="vocab_size", prepare=_copy_checkpoint(_edit_config(vocab_size=10**12))),
    "export tampered vocab": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="vocab_size", prepare=_copy_checkpoint(_edit_config(vocab_size=10**7))),
    "export tampered width": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="d_model", prepare=_copy_checkpoint(_edit_config(d_model=32))),
    "export truncated weights": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="model.safetensors", prepare=_copy_checkpoint(_truncate_weights)),
    "export weights of another hash": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="sha-256", prepare=_copy_checkpoint(_flip_weight_byte)),
    "export weights missing": case(
        "export", "{tmp}/ckpt", "--out", "{tmp}/m.onnx", stage="checkpoint",
        fragment="model.safetensors",
        prepare=_copy_checkpoint(lambda c: (c / "model.safetensors").unlink())),
    # ---- export: outputs
    "export missing checkpoint": case("export", "{tmp}/absent", "--out", "{tmp}/m.onnx",
                                      stage="checkpoint", fragment="absent"),
    "export over the weights": case("export", "{ckpt}", "--out", "{ckpt}/model.safetensors",
                                    stage="output", fragment="is an input"),
    "export over the config": case("export", "{ckpt}", "--out", "{ckpt}/config.json",
                                   stage="output", fragment="is an input"),
    "export over an existing file": case("export", "{ckpt}", "--out", "{onnx}",
                                         stage="output", fragment="--force"),
    "export into a folder": case("export", "{ckpt}", "--out", "{tmp}", stage="output",
                                 fragment="folder"),
    "export into an unwritable place": case("export", "{ckpt}", "--out", "/proc/x/m.onnx",
                                            stage="output", fragment="cannot write"),
    "export overlong name": case("export", "{ckpt}", "--out", "{tmp}/" + LONG + ".onnx",
                                 stage="output", fragment="characters"),
    "export opset too low": case("export", "{ckpt}", "--out", "{tmp}/m.onnx", "--opset", "12",
                                 stage="export", fragment="opset"),
    "export zero max seq": case("export", "{ckpt}", "--out", "{tmp}/m.onnx", "--max-seq", "0",
                                stage="export", fragment="max"),
    # ---- inspect and validate
    "inspect missing file": case("inspect", "{tmp}/absent.onnx", stage="export",
                                 fragment="absent.onnx"),
    "inspect not onnx": case("inspect", "{tmp}/x.onnx", stage="export", fragment="x.onnx",
                             prepare=_write("x.onnx", "hello")),
    "validate a folder as model": case("validate", "{ckpt}", "{tmp}", stage="validation",
                                       fragment="folder"),
    "validate missing model": case("validate", "{ckpt}", "{tmp}/absent.onnx",
                                   stage="validation", fragment="absent.onnx"),
    "validate corrupt model": case("validate", "{ckpt}", "{tmp}/x.onnx", stage="validation",
                                   fragment="x.onnx", prepare=_write("x.onnx", b"\x00\x01")),
    "validate json into unwritable": case("validate", "{ckpt}", "{onnx}", "--json-out",
                                          "/proc/x/r.json", stage="output",
                                          fragment="cannot write"),
    "validate json into a folder": case("validate", "{ckpt}", "{onnx}", "--json-out", "{tmp}",
                                        stage="output", fragment="folder"),
    "validate markdown into a folder": case("validate", "{ckpt}", "{onnx}", "--markdown",
                                            "{tmp}", stage="output", fragment="folder"),
    "validate bad shapes": case("validate", "{ckpt}", "{onnx}", "--shapes", "axb",
                                stage="validation", fragment="axb"),
    "validate shape above max seq": case("validate", "{ckpt}", "{onnx}", "--shapes", "1x999",
                                         stage="validation", fragment="999"),
    "validate negative tolerance": case("validate", "{ckpt}", "{onnx}", "--atol", "-1",
                                        stage="validation", fragment="atol"),
    "validate unknown provider": case("validate", "{ckpt}", "{onnx}", "--providers", "Nope",
                                      stage="validation", fragment="Nope"),
    # ---- optimize
    "optimize missing model": case("optimize", "{tmp}/absent.onnx", "--out", "{tmp}/o.onnx",
                                   stage="export", fragment="absent.onnx"),
    "optimize not onnx": case("optimize", "{tmp}/x.onnx", "--out", "{tmp}/o.onnx",
                              stage="export", fragment="x.onnx",
                              prepare=_write("x.onnx", "hello")),
    # any ONNX model is optimized (feeds from its signature); one of strings cannot be fed
    "optimize model with a string input": case(
        "optimize", "{tmp}/strings.onnx", "--out", "{tmp}/o.onnx", stage="export",
        fragment="input text is a string tensor", prepare=_string_input_onnx),
    "optimize over its input": case("optimize", "{onnx}", "--out", "{onnx}", "--force",
                                    stage="output", fragment="input of this command"),
    "optimize existing output": case("optimize", "{onnx}", "--out", "{tmp}/o.onnx",
                                     stage="output", fragment="--force",
                                     prepare=_write("o.onnx", "keep me")),
    "optimize output is a folder": case("optimize", "{onnx}", "--out", "{tmp}", stage="output",
                                        fragment="folder"),
    "optimize unknown method": case("optimize", "{onnx}", "--out", "{tmp}/o.onnx",
                                    "--method", "fastest", stage="usage", fragment="fastest"),
    "optimize bad level": case("optimize", "{onnx}", "--out", "{tmp}/o.onnx", "--method",
                               "onnxruntime", "--opt-level", "0", stage="export",
                               fragment="opt-level 0"),
    # ---- convert (a pretrained decoder)
    "convert a checkpoint": case("convert", "--hf-model", "{ckpt}", "--out", "{tmp}/c",
                                 stage="data", fragment="not a Hugging Face model folder"),
    "convert no such file": case("convert", "--hf-model", "{tmp}/absent.gguf", "--out",
                                 "{tmp}/c", stage="data", fragment="save_pretrained folder"),
    # ---- predict (in process: no server)
    "generate no prompt": case("generate", "{onnx}", stage="data", fragment="--prompt"),
    "generate missing model": case("generate", "{tmp}/absent.onnx", "--prompt", "w1",
                                   stage="model", fragment="absent.onnx"),
    "generate a classifier": case("generate", "{onnx}", "--prompt", "w1", stage="model",
                                  fragment="not a text-generation export"),
    "predict no texts": case("predict", "{onnx}", stage="data", fragment="--text"),
    "predict text and file": case("predict", "{onnx}", "--text", "w1", "--text-file", "{tmp}/l.txt",
                                  stage="data", fragment="not both",
                                  prepare=_write("l.txt", "w1\n")),
    "predict missing model": case("predict", "{tmp}/absent.onnx", "--text", "w1",
                                  stage="model", fragment="absent.onnx"),
    "predict folder as model": case("predict", "{tmp}", "--text", "w1", stage="model",
                                    fragment="is a folder"),
    "predict foreign onnx": case("predict", "{tmp}/foreign.onnx", "--text", "w1",
                                 stage="model", fragment="not exported by attndeploy",
                                 prepare=_foreign_onnx),
    "predict checkpoint config as model": case("predict", "{ckpt}/config.json", "--text", "w1",
                                               stage="model", fragment="cannot load"),
    "predict empty text": case("predict", "{onnx}", "--text", "w1", "--text", " ",
                               stage="data", fragment="--text #2 has no tokens"),
    "predict blank line": case("predict", "{onnx}", "--text-file", "{tmp}/l.txt", stage="data",
                               fragment="line 2 of", prepare=_write("l.txt", "w1\n\nw2\n")),
    "predict line over max seq": case("predict", "{onnx}", "--text-file", "{tmp}/l.txt",
                                      stage="data", fragment="--truncate",
                                      prepare=_write("l.txt", "w1 " * 40 + "\n")),
    "predict missing file": case("predict", "{onnx}", "--text-file", "{tmp}/absent.txt",
                                 stage="data", fragment="absent.txt"),
    "predict file not utf-8": case("predict", "{onnx}", "--text-file", "{tmp}/l.txt", stage="data",
                                   fragment="not UTF-8", prepare=_write("l.txt", b"w1 \xff\n")),
    "predict line over the limit per text": case(
        "predict", "{onnx}", "--text-file", "{tmp}/l.txt", stage="data",
        fragment="line 2 of {tmp}/l.txt has more than 65536 bytes, the limit per text",
        prepare=_write("l.txt", LONG_LINE)),
    "predict tokenizer metadata nested deep": case(
        "predict", "{tmp}/deep.onnx", "--text", "w1", stage="model",
        fragment="deep.onnx: attndeploy metadata attndeploy.tokenizer nests JSON more than 64 "
                 "levels deep", prepare=_deep_tokenizer_metadata),
    "predict zero batch": case("predict", "{onnx}", "--text", "w1", "--batch-size", "0",
                               stage="usage", fragment="--batch-size"),
    "predict zero threads": case("predict", "{onnx}", "--text", "w1", "--threads", "0",
                                 stage="usage", fragment="--threads"),
    "predict text file as model": case("predict", "{tmp}/m.onnx", "--text", "w1", stage="model",
                                       fragment="cannot load", prepare=_write("m.onnx", "w1\n")),
    "predict stdin closed": case("predict", "{onnx}", "--text-file", "-", stage="data",
                                 fragment="stdin is closed", stdin=CLOSED),
    "predict stdin not utf-8": case("predict", "{onnx}", "--text-file", "-", stage="data",
                                    fragment="stdin is not UTF-8 text (bad byte at offset 6, "
                                             "line 2)", stdin=b"w1 w2\n\xff\n"),
    "predict long line in a later chunk": case(
        "predict", "{onnx}", "--text-file", "{tmp}/l.txt", "--jsonl", stage="data",
        fragment=f"line {LATE} of", prepare=_write("l.txt", "w1\n" * (LATE - 1) + "w1 " * 40)),
    "predict blank line in a later chunk": case(
        "predict", "{onnx}", "--text-file", "-", stage="data",
        fragment=f"line {LATE} of stdin has no "
        "tokens", stdin=b"w1\n" * (LATE - 1) + b"\n"),
    # ---- deploy
    "deploy unknown target": case("deploy", "nomad", stage="usage", fragment="nomad"),
    "deploy pvc sub-path with a shell command": case(
        "deploy", "kubernetes", "--repo", "{repo}", "--out", "{tmp}/d", "--model-store",
        "pvc://claim/p;touch /tmp/X #", stage="deploy", fragment="--model-store"),
    "deploy replicas beyond the practical bound": case(
        "deploy", "kubernetes", "--repo", "{repo}", "--out", "{tmp}/d", "--max-replicas",
        "100000000000", stage="usage", fragment="less than or equal to 1000"),
    "deploy min above max": case("deploy", "kubernetes", "--repo", "{repo}", "--out", "{tmp}/d",
                                 "--min-replicas", "5", "--max-replicas", "3", stage="deploy",
                                 fragment="--min-replicas 5 is above --max-replicas 3"),
    "deploy unknown store scheme": case("deploy", "kubernetes", "--repo", "{repo}", "--out",
                                        "{tmp}/d", "--model-store", "ftp://host/models",
                                        stage="deploy", fragment="unknown scheme 'ftp://'"),
    "deploy kserve without store": case("deploy", "kubernetes", "--repo", "{repo}", "--out",
                                        "{tmp}/d", "--kserve", stage="deploy",
                                        fragment="--kserve needs --model-store"),
    "deploy unknown triton release": case("deploy", "kubernetes", "--repo", "{repo}", "--out",
                                          "{tmp}/d", "--image",
                                          "nvcr.io/nvidia/tritonserver:24.11-py3", stage="deploy",
                                          fragment="not in check-repo's table"),
    "deploy no model of the flavour": case("deploy", "kubernetes", "--repo", "{repo}", "--out",
                                           "{tmp}/d", "--gpu", "1", stage="deploy",
                                           fragment="holds no onnxruntime-flavour model"),
    "deploy repository check-repo rejects": case("deploy", "kubernetes", "--repo", "{tmp}/repo",
                                                 "--out", "{tmp}/d", stage="repository",
                                                 fragment="config.pbtxt is missing",
                                                 prepare=_write("repo/m/1/model.onnx", b"")),
    "deploy output inside the repository": case("deploy", "kubernetes", "--repo", "{repo}",
                                                "--out", "{repo}/deploy", stage="output",
                                                fragment="inside the repository"),
    "deploy existing output": case("deploy", "kubernetes", "--repo", "{repo}", "--out",
                                   "{tmp}/d", stage="output", fragment="already exists",
                                   prepare=_write("d/keep.txt", "mine")),
    # ---- package and check-repo
    "package tokenizer metadata nested deep": case(
        "package", "{tmp}/deep.onnx", "--repo", "{tmp}/r", "--model", "m", stage="repository",
        fragment="deep.onnx: metadata attndeploy.tokenizer nests JSON more than 64 levels deep",
        prepare=_deep_tokenizer_metadata),
    "quantize tokenizer metadata nested deep": case(
        "quantize", "{tmp}/deep.onnx", "--out", "{tmp}/q.onnx", stage="model",
        fragment="nests JSON more than 64 levels deep", prepare=_deep_tokenizer_metadata),
    "optimize tokenizer metadata nested deep": case(
        "optimize", "{tmp}/deep.onnx", "--out", "{tmp}/o.onnx", stage="model",
        fragment="nests JSON more than 64 levels deep", prepare=_deep_tokenizer_metadata),
    "package missing source": case("package", "{tmp}/absent", "--repo", "{tmp}/r",
                                   stage="repository", fragment="absent"),
    "package empty name": case("package", "{onnx}", "--repo", "{tmp}/r", "--model", "",
                               stage="repository", fragment="name"),
    "package overlong name": case("package", "{onnx}", "--repo", "{tmp}/r", "--model", LONG,
                                  stage="repository", fragment="name"),
    "package name with a slash": case("package", "{onnx}", "--repo", "{tmp}/r", "--model",
                                      "a/b", stage="repository", fragment="name"),
    "package repo is a file": case("package", "{onnx}", "--repo", "{tmp}/f", stage="output",
                                   fragment="is a file", prepare=_write("f", "x")),
    "package repo unwritable": case("package", "{onnx}", "--repo", "/proc/x/r",
                                    stage="output", fragment="cannot write"),
    "package existing without force": case("package", "{onnx}", "--repo", "{repo}", "--model",
                                           "standard", stage="repository", fragment="--force"),
    "package zero batch": case("package", "{onnx}", "--repo", "{tmp}/r", "--max-batch-size",
                               "-1", stage="repository", fragment="max_batch_size"),
    "package zero instances": case("package", "{onnx}", "--repo", "{tmp}/r", "--instances",
                                   "0", stage="repository", fragment="instances"),
    "package zero version": case("package", "{onnx}", "--repo", "{tmp}/r", "--version", "0",
                                 stage="repository", fragment="version"),
    "package zero text limit": case("package", "{onnx}", "--repo", "{tmp}/r",
                                    "--max-text-bytes", "0", stage="usage",
                                    fragment="--max-text-bytes"),
    "package text limit above request limit": case(
        "package", "{onnx}", "--repo", "{tmp}/r", "--max-text-bytes", "2000",
        "--max-request-bytes", "1000", stage="repository",
        fragment="max_text_bytes (2000) exceeds max_request_bytes (1000)"),
    "predict one huge word": case("predict", "{onnx}", "--text", "w" * 70_000, stage="data",
                                  fragment="has 70000 bytes, more than the limit of 65536"),
    "package a foreign onnx": case("package", "{tmp}/foreign.onnx", "--repo", "{tmp}/r",
                                   stage="repository", fragment="foreign.onnx",
                                   prepare=_foreign_onnx),
    "check-repo missing": case("check-repo", "--repo", "{tmp}/absent", stage="repository",
                               fragment="absent"),
    "package a tampered onnx": case("package", "{tmp}/tampered.onnx", "--repo", "{tmp}/r",
                                    stage="repository", fragment="declares dims [2147483648, "
                                    "1048576] of FLOAT", prepare=_tampered_onnx),
    "check-repo tampered onnx": case("check-repo", "--repo", "{tmp}/repo", stage="repository",
                                     fragment="declares dims [2147483648, 1048576] of FLOAT",
                                     prepare=_tampered_served_model),
    "check-repo link where the server logs": case(
        "check-repo", "--repo", "{tmp}/repo", stage="repository",
        fragment=".attndeploy-server.log is a symbolic link", prepare=_server_log_link),
    "check-repo huge junk line": case("check-repo", "--repo", "{tmp}/repo", stage="repository",
                                      fragment="config.pbtxt does not parse as a Triton",
                                      prepare=_junk_config_line),
    "check-repo staging folder": case("check-repo", "--repo", "{tmp}/repo", stage="repository",
                                      fragment=".standard.999999.abcd.tmp",
                                      prepare=_staging_folder),
    # ---- serve, stop
    "serve port above range": case("serve", "--repo", "{repo}", "--grpc-port", "70000",
                                   stage="usage", fragment="65535"),
    "serve port zero": case("serve", "--repo", "{repo}", "--http-port", "0", stage="usage",
                            fragment="--http-port"),
    "serve missing repo": case("serve", "--repo", "{tmp}/absent", stage="server",
                               fragment="absent"),
    "serve empty repo": case("serve", "--repo", "{tmp}/repo", stage="server",
                             fragment="attndeploy package", prepare=_empty_repo),
    "serve same ports": case("serve", "--repo", "{repo}", "--grpc-port", "{port}",
                             "--http-port", "{port}", "--metrics-port", "1", stage="server",
                             fragment="differ"),
    "serve missing binary": case("serve", "--repo", "{repo}", "--tritonserver",
                                 "{tmp}/absent-bin", stage="server", fragment="absent-bin"),
    "serve unknown model": case("serve", "--repo", "{repo}", "--model", "nope",
                                stage="server", fragment="nope"),
    "stop with no record": case("stop", "--repo", "{tmp}", stage="server",
                                fragment="No background server"),
    "stop on a config file": case("stop", "--state-file", "{ckpt}/config.json",
                                  stage="server", fragment="config.json"),
    "stop on a foreign json": case("stop", "--state-file", "{tmp}/s.json", stage="server",
                                   fragment="s.json", prepare=_write("s.json", '{"pid": 1}')),
    # ---- infer, loadtest (no server listens on {port})
    "infer server down": case("infer", "--model", "standard", "--repo", "{repo}", "--ids",
                              "3,4,5", "--url", "127.0.0.1:{port}", stage="server",
                              fragment="{port}"),
    "infer unknown model, no server": case("infer", "--model", "nope", "--repo", "{repo}",
                                           "--text", "a", "--url", "127.0.0.1:{port}",
                                           stage="server", fragment="no triton server answers"),
    "infer image file missing": case("infer", "--model", "m_image", "--image-file",
                                     "{tmp}/missing.png", "--url", "127.0.0.1:{port}",
                                     stage="data", fragment="missing.png: cannot read"),
    "infer image file empty": case("infer", "--model", "m_image", "--image-file", "{tmp}/e.png",
                                   "--url", "127.0.0.1:{port}", stage="data",
                                   fragment="e.png: an empty file", prepare=_write("e.png", b"")),
    "infer image file is a folder": case("infer", "--model", "m_image", "--image-file", "{tmp}",
                                         "--url", "127.0.0.1:{port}", stage="data",
                                         fragment="cannot read"),
    "infer image and text": case("infer", "--model", "m_image", "--image-file", "{tmp}/i.png",
                                 "--text", "a", "--url", "127.0.0.1:{port}", stage="data",
                                 fragment="--image-file files, or --text or --ids, not both",
                                 prepare=_write("i.png", b"\x89PNG")),
    "infer image, server down": case("infer", "--model", "m_image", "--image-file",
                                     "{tmp}/i.png", "--url", "127.0.0.1:{port}",
                                     stage="server", fragment="no triton server answers",
                                     prepare=_write("i.png", b"\x89PNG")),
    "infer bad ids": case("infer", "--model", "standard", "--repo", "{repo}", "--ids", "a,b",
                          "--url", "127.0.0.1:{port}", stage="data", fragment="--ids"),
    "loadtest server down": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                 "--url", "127.0.0.1:{port}", "--concurrency", "1",
                                 stage="server", fragment="{port}"),
    "loadtest image folder missing": case("loadtest", "--model", "m_image", "--image-folder",
                                          "{tmp}/nope", "--url", "127.0.0.1:{port}",
                                          stage="loadtest",
                                          fragment="image_folder {tmp}/nope is not a folder"),
    "loadtest image folder and text file": case(
        "loadtest", "--model", "m_image", "--image-folder", "{tmp}", "--text-file", "{tmp}/t",
        "--url", "127.0.0.1:{port}", stage="loadtest",
        fragment="give text_file or image_folder, not both", prepare=_write("t", "a\n")),
    "loadtest zero concurrency": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                      "--concurrency", "0", stage="usage",
                                      fragment="Invalid value for '--concurrency': 0 is not"),
    "loadtest concurrency not numbers": case("loadtest", "--model", "m", "--concurrency", "a,b",
                                             stage="usage", fragment="'--concurrency'"),
    "loadtest zero request rate": case("loadtest", "--model", "m", "--request-rate", "5,0",
                                       stage="usage", fragment="'--request-rate': 0 is not"),
    "loadtest zero seq": case("loadtest", "--model", "m", "--seq", "16,0", stage="usage",
                              fragment="'--seq': 0 is not"),
    "loadtest zero batch": case("loadtest", "--model", "m", "--batch-size", "0", stage="usage",
                                fragment="'--batch-size'"),
    "loadtest zero window": case("loadtest", "--model", "m", "--window", "0", stage="usage",
                                 fragment="'--window': 0 is not"),
    "loadtest fewer windows than stable": case("loadtest", "--model", "m", "--max-windows",
                                               "1", stage="usage", fragment="'--max-windows'"),
    "loadtest negative warmup": case("loadtest", "--model", "m", "--warmup-requests", "-1",
                                     stage="usage", fragment="'--warmup-requests'"),
    "loadtest check fraction above one": case("loadtest", "--model", "m", "--check-fraction",
                                              "2", stage="usage", fragment="'--check-fraction'"),
    "infer zero timeout": case("infer", "--model", "m", "--ids", "3", "--timeout", "0",
                               stage="usage", fragment="'--timeout': 0 is not"),
    "infer http to the grpc port": case(
        "infer", "--model", "standard", "--repo", "{repo}", "--ids", "3,4", "--protocol", "http",
        "--url", "127.0.0.1:{grpc_port}", stage="server",
        fragment="does not speak HTTP (Expected HTTP/, RTSP/ or ICE/); is it the gRPC port? use "
                 "--url 127.0.0.1:8000 or --protocol grpc"),
    "infer grpc to the http port": case(
        "infer", "--model", "standard", "--repo", "{repo}", "--ids", "3,4", "--url",
        "127.0.0.1:{http_port}", stage="server",
        fragment="is it the HTTP port? use --url 127.0.0.1:8001 or --protocol http"),
    "loadtest http to the grpc port": case(
        "loadtest", "--model", "standard", "--repo", "{repo}", "--protocol", "http", "--url",
        "127.0.0.1:{grpc_port}", "--concurrency", "1", stage="server",
        fragment="is it the gRPC port? use --url 127.0.0.1:8000 or --protocol grpc"),
    "loadtest grpc to the http port": case(
        "loadtest", "--model", "standard", "--repo", "{repo}", "--url", "127.0.0.1:{http_port}",
        "--concurrency", "1", stage="server",
        fragment="does not speak gRPC"),
    "loadtest two modes": case("loadtest", "--model", "standard", "--repo", "{repo}",
                               "--concurrency", "1", "--request-rate", "5", stage="loadtest",
                               fragment="not both"),
    "loadtest seq above max": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                   "--seq", "999", "--url", "127.0.0.1:{port}",
                                   stage="loadtest", fragment="999"),
    "loadtest json unwritable": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                     "--url", "127.0.0.1:{port}", "--json-out", "/proc/x/l.json",
                                     stage="output", fragment="cannot write"),
    "loadtest json-out into a folder": case("loadtest", "--model", "standard", "--repo",
                                            "{repo}", "--url", "127.0.0.1:{port}",
                                            "--json-out", "{tmp}", stage="output",
                                            fragment="folder"),
    "loadtest json-out under a file": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                           "--url", "127.0.0.1:{port}", "--json-out",
                                           "{ckpt}/config.json/r.json", stage="output",
                                           fragment="cannot write"),
    "loadtest plot into a folder": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                        "--url", "127.0.0.1:{port}", "--plot", "{tmp}",
                                        stage="output", fragment="folder"),
    "loadtest text file line over the limit": case(
        "loadtest", "--model", "standard", "--repo", "{repo}", "--url", "127.0.0.1:{port}",
        "--text-file", "{tmp}/l.txt", "--concurrency", "1", stage="loadtest",
        fragment="line 2 of {tmp}/l.txt has more than 65536 bytes, the limit per text",
        prepare=_write("l.txt", LONG_LINE)),
    "loadtest bad stability": case("loadtest", "--model", "standard", "--repo", "{repo}",
                                   "--stability", "2", stage="usage",
                                   fragment="'--stability': 2 is not"),
    # ---- held-out
    "held-out missing checkpoint": case("held-out", "{tmp}/absent", "--out", "{tmp}/h.jsonl",
                                        stage="checkpoint", fragment="absent"),
    "held-out of an onnx file": case("held-out", "{onnx}", "--out", "{tmp}/h.jsonl",
                                     stage="checkpoint",
                                     fragment="`attndeploy held-out` reads a checkpoint"),
    "held-out over an existing file": case("held-out", "{ckpt}", "--out", "{tmp}/h.jsonl",
                                           stage="output", fragment="already exists",
                                           prepare=_write("h.jsonl", "kept\n")),
    "held-out into a folder": case("held-out", "{ckpt}", "--out", "{tmp}", stage="output",
                                   fragment="folder"),
    "held-out data file gone": case(
        "held-out", "{tmp}/ckpt", "--out", "{tmp}/h.jsonl", stage="data",
        fragment="gone.jsonl: no such data file",
        prepare=_copy_checkpoint(_set_data(data_file="gone.jsonl", eval_fraction=0.2,
                                           seed=0))),
    "held-out over its own data file": case(
        "held-out", "{ckpt}", "--data", "{tmp}/d.jsonl", "--out", "{tmp}/d.jsonl", "--force",
        stage="output", fragment="it is an input of this command",
        prepare=_write("d.jsonl", '{"text": "a", "label": "x"}\n')),
    "held-out data line over the limit": case(
        "held-out", "{tmp}/ckpt", "--out", "{tmp}/h.jsonl", stage="data",
        fragment="line 2 of {tmp}/d.jsonl has more than 458752 bytes",
        prepare=_trained_on(LONG_JSONL)),
    # ---- quantize and debug compare
    "quantize image data not a folder": case(
        "quantize", "{tmp}/vit_standard_0.onnx", "--out", "{tmp}/q.onnx", "--data",
        "{tmp}/absent", stage="data", fragment="an image folder", prepare=_image_export),
    "quantize missing model with decoder options": case(
        "quantize", "{tmp}/absent.onnx", "--out", "{tmp}/q.onnx", "--prompts", "2",
        stage="model", fragment="no ONNX model at"),
    "quantize missing model": case("quantize", "{tmp}/absent.onnx", "--out", "{tmp}/q.onnx",
                                   stage="model", fragment="absent.onnx"),
    "quantize over its own input": case("quantize", "{onnx}", "--out", "{onnx}",
                                        stage="output", fragment="input of this command"),
    "quantize static without data": case("quantize", "{onnx}", "--out", "{tmp}/q.onnx",
                                         "--method", "static", stage="data",
                                         fragment="calibrates on labelled texts"),
    "quantize per-row static": case("quantize", "{onnx}", "--out", "{tmp}/q.onnx",
                                    "--method", "static", "--activations", "per-row",
                                    stage="config",
                                    fragment="--method static calibrates fixed ones"),
    "quantize negative tolerance": case("quantize", "{onnx}", "--out", "{tmp}/q.onnx",
                                        "--max-logit-change", "-1", stage="config",
                                        fragment="--max-logit-change must be > 0"),
    "quantize data line over the limit": case(
        "quantize", "{onnx}", "--out", "{tmp}/q.onnx", "--data", "{tmp}/d.jsonl", stage="data",
        fragment="line 2 of {tmp}/d.jsonl has more than 458752 bytes, the limit per JSONL line",
        prepare=_write("d.jsonl", LONG_JSONL)),
    "debug compare image with a text shape": case(
        "debug", "compare", "{tmp}/ckpt_vit_standard_0", "{tmp}/vit_standard_0.onnx",
        "--shapes", "4x17", stage="validation", fragment="batch sizes", prepare=_image_export),
    "debug compare missing onnx": case("debug", "compare", "{ckpt}", "{tmp}/absent.onnx",
                                       stage="validation", fragment="absent.onnx"),
    "debug unknown action": case("debug", "explain", stage="usage", fragment="explain"),
    # ---- a symbolic link at an output path, even a dangling one, is an existing output
    "train over a dangling link": case("train", *TINY, "--out", "{tmp}/link", stage="checkpoint",
                                       fragment="{tmp}/link already exists; pass --force",
                                       prepare=_dangling("link")),
    "train hf over a dangling link": case(
        "train", "--hf-model", "{tmp}/bert", "--dataset", "sparse_evidence", "--out", "{tmp}/link",
        stage="checkpoint", fragment="{tmp}/link already exists; pass --force",
        prepare=_dangling("link")),
    "export over a dangling link": case("export", "{ckpt}", "--out", "{tmp}/link",
                                        stage="output", fragment="{tmp}/link already exists",
                                        prepare=_dangling("link")),
    "export factory over a dangling link": case(
        "export", "--factory", "my_models:build", "--out", "{tmp}/link",
        stage="output", fragment="{tmp}/link already exists", prepare=_dangling("link")),
    "optimize over a dangling link": case("optimize", "{onnx}", "--out", "{tmp}/link",
                                          stage="output", fragment="{tmp}/link already exists",
                                          prepare=_dangling("link")),
    "quantize over a dangling link": case("quantize", "{onnx}", "--out", "{tmp}/link",
                                          stage="quantize", fragment="{tmp}/link already exists",
                                          prepare=_dangling("link")),
    "held-out over a dangling link": case("held-out", "{ckpt}", "--out", "{tmp}/link",
                                          stage="output", fragment="{tmp}/link already exists",
                                          prepare=_dangling("link")),
    "validate json over a dangling link": case("validate", "{ckpt}", "{onnx}", "--json-out",
                                               "{tmp}/link", stage="output",
                                               fragment="{tmp}/link already exists",
                                               prepare=_dangling("link")),
    "debug compare plot over a dangling link": case(
        "debug", "compare", "{ckpt}", "{onnx}", "--plot", "{tmp}/link", stage="output",
        fragment="{tmp}/link already exists", prepare=_dangling("link")),
    "loadtest csv over a dangling link": case(
        "loadtest", "--model", "standard", "--repo", "{repo}", "--url", "127.0.0.1:{port}",
        "--csv", "{tmp}/link", stage="output", fragment="{tmp}/link already exists",
        prepare=_dangling("link")),
    "tune json over a dangling link": case("tune", "--model", "standard", "--repo", "{repo}",
                                           "--json-out", "{tmp}/link", stage="output",
                                           fragment="{tmp}/link already exists",
                                           prepare=_dangling("link")),
    "deploy over a dangling link": case("deploy", "kubernetes", "--repo", "{repo}", "--out",
                                        "{tmp}/link", stage="output",
                                        fragment="{tmp}/link already exists",
                                        prepare=_dangling("link")),
    "package model folder a dangling link": case(
        "package", "{onnx}", "--repo", "{tmp}/repo", "--model", "m", stage="repository",
        fragment="{tmp}/repo/m already exist; pass --force", prepare=_dangling("repo/m")),
    "package repo a dangling link": case(
        "package", "{onnx}", "--repo", "{tmp}/link", "--force", stage="output",
        fragment="cannot write into {tmp}/link: it is a symbolic link to {tmp}/nowhere, which "
                 "does not exist", prepare=_dangling("link")),
    "export under a dangling link": case(
        "export", "{ckpt}", "--out", "{tmp}/link/m.onnx", "--force", stage="output",
        fragment="{tmp}/link is a symbolic link to {tmp}/nowhere, which does not exist",
        prepare=_dangling("link")),
    # ---- tune (refused before any server starts)
    "tune unknown model": case("tune", "--model", "nope", "--repo", "{repo}",
                               stage="repository", fragment="no model 'nope' in"),
    "tune budget below one measurement": case("tune", "--model", "standard", "--repo", "{repo}",
                                              "--budget-minutes", "0.05", stage="config",
                                              fragment="shorter than one measurement"),
    "tune zero latency budget": case("tune", "--model", "m", "--latency-budget-ms", "0",
                                     stage="usage", fragment="'--latency-budget-ms': 0 is not"),
    "tune text file line over the limit": case(
        "tune", "--model", "standard", "--repo", "{repo}", "--text-file", "{tmp}/l.txt",
        stage="loadtest", fragment="line 2 of {tmp}/l.txt has more than 65536 bytes",
        prepare=_write("l.txt", LONG_LINE)),
    "tune int8 not a file": case("tune", "--model", "standard", "--repo", "{repo}", "--int8",
                                 "{tmp}/q.onnx", stage="repository", fragment="is not a file"),
}


# --------------------------------------------------------------------------- running


def run_main(monkeypatch, capsys, argv: list[str]) -> tuple[int, str, list[str]]:
    monkeypatch.setattr("sys.argv", ["attndeploy", *argv])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


def snapshot(*folders: Path) -> dict[str, str]:
    """Every file and folder under `folders` (hidden ones included), with a digest of files."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            key = str(path)
            if path.is_symlink():  # a link is kept as a link, never followed
                found[key] = f"link to {os.readlink(path)}"
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained checkpoint, its export and a packaged repository, built by the CLI."""
    import os
    import subprocess
    import sys

    work = tmp_path_factory.mktemp("bad-inputs")

    def cli(*argv: str) -> None:
        result = subprocess.run([sys.executable, "-m", "attndeploy", *argv], cwd=work,
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr

    cli("train", *TINY, "--out", "ckpt")
    cli("export", "ckpt", "--out", "model.onnx")
    cli("package", "model.onnx", "--repo", "repo", "--model", "standard")
    return work


@pytest.fixture(scope="module")
def wrong_ports() -> Iterator[dict[str, str]]:
    """`grpc_port`: a gRPC server with no service; `http_port`: an HTTP/1 server answering 501 to
    everything. Each is the other protocol's wrong port."""
    import http.server
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    grpc_server = grpc.server(ThreadPoolExecutor(1))
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # stderr is the command's
            pass

    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    yield {"grpc_port": str(grpc_port), "http_port": str(http_server.server_address[1])}
    http_server.shutdown()
    http_server.server_close()
    grpc_server.stop(0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_error_and_writes_nothing(name, work, wrong_ports, tmp_path,
                                                        monkeypatch, capsys):
    bad = CASES[name]
    if bad.prepare is not None:
        bad.prepare(tmp_path, work)
    if bad.stdin is not None:
        monkeypatch.setattr("sys.stdin", None if bad.stdin == CLOSED
                            else io.TextIOWrapper(io.BytesIO(bad.stdin)))
    port = str(free_port())
    values = {"ckpt": str(work / "ckpt"), "onnx": str(work / "model.onnx"),
              "repo": str(work / "repo"), "tmp": str(tmp_path), "port": port, **wrong_ports}
    argv = [arg.format(**values) for arg in bad.argv]
    before = snapshot(work, tmp_path)
    code, out, err = run_main(monkeypatch, capsys, argv)
    assert "Traceback" not in out + "\n".join(err)
    assert code == bad.exit_code, (code, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"error ({bad.stage}): "), err[0]
    assert bad.fragment.format(**values).lower() in err[0].lower(), err[0]
    assert snapshot(work, tmp_path) == before


def test_the_table_covers_every_command():
    commands = {bad.argv[0] for bad in CASES.values()}
    assert commands >= set(cli_app.COMMANDS) - {"quickstart"}
    assert len(CASES) >= 60
