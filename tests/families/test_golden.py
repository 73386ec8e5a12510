"""The two built-in families' outputs, held byte for byte (golden files under `golden/`).

Classification and tagging became family specs (`attndeploy.families`); nothing a user sees
was to change on the way. From stored checkpoints (a GA-Net classifier and a GA-Net tagger,
trained briefly on the built-in sets and kept in `golden/<head>/checkpoint/`), this test
exports, predicts (`predict --json`), encodes the served wire form and packages the text model,
and compares every output with the file recorded before the families existed: the export's
signature and metadata, the JSON text, the wire arrays, the served config. It also trains
each head for a few steps and compares the loss history, which holds the head and the loss.

`ATTNDEPLOY_GOLDEN_UPDATE=1` rewrites the files (only for a change meant to alter them, said in
its commit).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import onnx
import pytest
import torch
from typer.testing import CliRunner

from attndeploy.checkpoint import load_checkpoint
from attndeploy.cli.app import app
from attndeploy.runtime.contract import encode_wire
from attndeploy.runtime.model import InferenceModel

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ATTNDEPLOY_GOLDEN_UPDATE") == "1"
HEADS = ("classification", "tagging")
TEXTS = {
    "classification": ["w3 w17 alpha w8 w2 w9 w11 w4 w5 w6 w12 w13 w14 w15 w16 w18",
                       "bravo w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16",
                       "w1 w2 w3"],
    "tagging": ["t1 t2 t3 t1 t4 t5 t6 t2 t7 t8", "t9 t10 t11 t12 t13 t14 t15 t9"],
}
runner = CliRunner()


def _check(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} missing: record it with ATTNDEPLOY_GOLDEN_UPDATE=1"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} changed"


def _cli(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _interface(model: onnx.ModelProto) -> dict:
    def dims(value: onnx.ValueInfoProto) -> list:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    meta = {p.key: p.value for p in model.metadata_props if p.key != "attndeploy.version"}
    return {
        "inputs": [[v.name, v.type.tensor_type.elem_type, dims(v)] for v in model.graph.input],
        "outputs": [[v.name, v.type.tensor_type.elem_type, dims(v)] for v in model.graph.output],
        "custom_nodes": sorted(n.op_type for n in model.graph.node if n.domain == "attndeploy"),
        "metadata": meta,
    }


@pytest.fixture(scope="module", params=HEADS)
def exported(request, tmp_path_factory) -> tuple[str, Path, Path]:
    head = request.param
    work = tmp_path_factory.mktemp(head)
    onnx_path = work / "model.onnx"
    _cli("export", str(GOLDEN / head / "checkpoint"), "--out", str(onnx_path))
    return head, work, onnx_path


def test_the_export_s_signature_and_metadata_are_unchanged(exported) -> None:
    head, _, onnx_path = exported
    interface = _interface(onnx.load(str(onnx_path), load_external_data=False))
    _check(GOLDEN / head / "interface.json", json.dumps(interface, indent=1, sort_keys=True))


def test_predict_json_is_unchanged(exported) -> None:
    head, _, onnx_path = exported
    args = ["predict", str(onnx_path), "--json"]
    for text in TEXTS[head]:
        args += ["--text", text]
    out = _cli(*args).replace(str(onnx_path), "MODEL")
    _check(GOLDEN / head / "predict.json", out)


def test_the_wire_form_is_unchanged(exported) -> None:
    head, _, onnx_path = exported
    model = InferenceModel(onnx_path, threads=1)
    predictions = model.predict(TEXTS[head])
    wire = encode_wire(predictions, tagging=head == "tagging", gated=model.gated)
    as_lists = {name: [str(array.dtype), array.tolist()] for name, array in sorted(wire.items())}
    text = json.dumps(as_lists, indent=1, default=lambda v: v.decode("utf-8"))
    _check(GOLDEN / head / "wire.json", text)


def test_the_served_text_model_s_config_is_unchanged(exported) -> None:
    head, work, onnx_path = exported
    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    _cli("package", str(onnx_path), "--repo", str(repo), "--flavor", "python",
         "--model", "golden")
    config = (repo / "golden_text" / "config.pbtxt").read_text(encoding="utf-8")
    _check(GOLDEN / head / "text_config.pbtxt", config)


@pytest.mark.parametrize("head", HEADS)
def test_training_a_head_gives_the_same_losses(head: str) -> None:
    from attndeploy.train import TrainConfig, fit, load_training_data

    dataset = "sparse_evidence" if head == "classification" else "tagging"
    data = load_training_data(task=dataset, n_train=64, n_eval=32, max_seq=24, seed=0)
    model = load_checkpoint(GOLDEN / head / "checkpoint")  # the stored weights to start
    torch.manual_seed(0)
    result = fit(model, data.train_set, data.eval_set,
                 TrainConfig(steps=6, batch_size=16, seed=0), progress=False, eval_every=3)
    losses = [{key: value for key, value in sorted(row.items())
               if "loss" in key or key in ("accuracy", "step", "density")}
              for row in result.history]
    assert losses and all("loss" in "".join(row) for row in losses)
    _check(GOLDEN / head / "losses.json", json.dumps(losses, indent=1))
