"""Adding a variant touches only its folder: a copy of the package plus the folder of a fifth
variant (`tests/variants/fifth_variant/tempered`, with a config, a layer and its own op) trains,
saves, exports with its custom node and validates, and the CLI offers it. A gated one
(`tests/variants/fifth_variant/sieve`: its own gate machinery, training hooks, presets, limits and
figures in its spec) goes the whole way through the CLI: train (its density penalty steered to the
target), export, validate (gate agreement), package (python flavour, with its text model), serve,
infer and predict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from attndeploy.checkpoint import save_checkpoint
from attndeploy.cli.options import Variant
from attndeploy.config import ModelConfig, TemperedConfig
from attndeploy.export.exporter import export_checkpoint
from attndeploy.models import build_model
from attndeploy.validate import ValidationOptions, validate_model
from attndeploy.variants import variant_names

out = Path(sys.argv[1])
config = ModelConfig(vocab_size=30, num_labels=2, variant="tempered", d_model=16, n_heads=2,
                     n_layers=2, d_ff=32, max_seq=16, tempered=TemperedConfig(tau=0.5))
assert ModelConfig.from_dict(config.to_dict()) == config
torch.manual_seed(0)
checkpoint = save_checkpoint(build_model(config), out / "ckpt", label_names=("a", "b"))
result = export_checkpoint(checkpoint, out / "model.onnx")
report = validate_model(checkpoint, out / "model.onnx",
                        ValidationOptions(shapes="1x1,2x5,3x9", reference_shapes="2x5"))
print(json.dumps({"variants": list(variant_names()), "cli": [v.value for v in Variant],
                  "nodes": result.custom_nodes, "passed": report.passed}))
"""


def _tree_with(tmp_path: Path, variant: str) -> dict[str, str]:
    """A copy of the package with the variant's folder added; the environment that imports it."""
    package = tmp_path / "src" / "attndeploy"
    shutil.copytree(ROOT / "attndeploy", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(__file__).parent / "fifth_variant" / variant,
                    package / "variants" / variant)
    return {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_a_fifth_variant_folder_is_all_it_takes(tmp_path):
    env = _tree_with(tmp_path, "tempered")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["variants"] == ["standard", "qvi", "ganet", "evolving", "tempered"]
    assert facts["cli"] == facts["variants"]
    assert facts["nodes"] == {"TemperedAttention": 2}
    assert facts["passed"]




@pytest.mark.slow
@pytest.mark.integration
def test_a_gated_fifth_variant_goes_from_training_to_the_server(tmp_path):
    from attndeploy.data import example_texts
    from attndeploy.serving.server.ports import free_ports

    env = _tree_with(tmp_path, "sieve")
    texts = example_texts("sparse_evidence", 4, seed=4242)  # held-out-like texts of the task

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "attndeploy", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{args[0]}: {done.stderr[-3000:]}"
        return done.stdout

    assert "sieve" in cli("train", "--help")
    trained = json.loads(cli("train", "--variant", "sieve", "--dataset", "sparse_evidence",
                             "--steps", "80", "--n-train", "400", "--n-eval", "100",
                             "--n-val", "100", "--out", "ckpt", "--json"))
    metrics, training = trained["metrics"], trained["training"]
    # Its training hook gave the penalty's starting weight; the shared controller then steered it.
    assert metrics["density_target"] == 0.3 and metrics["density"] < 1.0
    assert training["final_density_weight"] != 1e-3  # SieveConfig.density_weight, moved

    exported = cli("export", "ckpt", "--out", "model.onnx")
    assert "SieveAttention" in exported and "GatedAttentionPooling" in exported
    report = json.loads(cli("validate", "ckpt", "model.onnx", "--shapes", "1x4,2x9,3x16",
                            "--json"))
    assert report["passed"] and report["gates"], report["failures"]

    predicted = json.loads(cli("predict", "model.onnx", *[a for t in texts for a in ("--text", t)],
                               "--json"))["predictions"]
    assert all(set(p["attended"]) <= set(p["tokens"]) for p in predicted)
    assert any(len(p["attended"]) < len(p["tokens"]) for p in predicted)  # some gates closed

    cli("package", "model.onnx", "--repo", "repo", "--model", "sieve", "--flavor", "python")
    grpc, http, metrics_port = free_ports(3)
    cli("serve", "--repo", "repo", "--background", "--grpc-port", str(grpc), "--http-port",
        str(http), "--metrics-port", str(metrics_port))
    try:
        for text, local in zip(texts, predicted, strict=True):
            served = json.loads(cli("infer", "--model", "sieve_text", "--text", text,
                                    "--url", f"127.0.0.1:{grpc}", "--json"))
            assert (served["label"], served["attended"]) == (local["label"], local["attended"])
            assert served["logits"] == pytest.approx(local["logits"], abs=1e-4)
    finally:
        cli("stop", "--repo", "repo")


HF_SCRIPT = r"""
import copy, json, sys
from pathlib import Path
import torch, transformers
from attndeploy.integrations.hf_checkpoint import HFClassifier, model_config_of
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer
from attndeploy.integrations.transformers import conversion_of, convert

out = Path(sys.argv[1])
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=3,
                                 num_attention_heads=4, intermediate_size=64,
                                 max_position_embeddings=40, num_labels=3)
original = transformers.BertForSequenceClassification(config).eval()
model = convert(copy.deepcopy(original), "sieve", hidden=8)
ids = torch.randint(1, 60, (4, 11))
mask = torch.ones(4, 11, dtype=torch.long)
for row, length in enumerate((11, 7, 3, 1)):
    mask[row, length:] = 0
with torch.no_grad():
    want = original(input_ids=ids, attention_mask=mask).logits
    got = model(input_ids=ids, attention_mask=mask).logits
conversion = conversion_of(model)
classifier = HFClassifier(model, model_config_of(model, 16))
with torch.no_grad():
    gates = classifier(ids, mask)["gates"]  # the hard gates of the machinery's logits
classifier.train()
details = classifier(ids[:, :8], mask[:, :8], details=True)
details["logits"].sum().backward()  # the gates learn through the soft path
gradient = conversion.gate_network.score.weight.grad

# `train --hf-model --variant sieve` on a tiny pretrained folder with its tokenizer
words = "w1 w2 alpha amber bravo cobalt w3 w4 good bad day"
tokenizer = WordPieceTokenizer.train([words] * 3)
bert = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=40)
transformers.BertModel(bert).save_pretrained(str(out / "pre"))
tokenizer._tokenizer.save(str(out / "pre" / "tokenizer.json"))
rows = [{"text": f"w{i % 4} {'good' if i % 2 else 'bad'} day", "label": "pos" if i % 2 else "neg"}
        for i in range(40)]
(out / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
print(json.dumps({
    "max_error": (got - want).abs().max().item(),
    "machinery": type(conversion.gate_network).__name__,
    "all_open": bool(torch.equal(gates, mask.bool())),
    "density": float(details["density_penalty"]),
    "gates_shape": list(details["gates"].shape),
    "gate_gradient": bool(gradient is not None and gradient.abs().sum() > 0),
}))
"""


def test_a_gated_plug_in_variant_converts_a_hugging_face_model(tmp_path):
    """The conversion reads the variant's spec: `sieve`'s own gate machinery scores the tokens
    (its spec's `gating`), its layers run through `forward_context`, and a warm start computes
    what the model computed (within the 1e-5 of the built-in variants' test); in training its
    soft gates give the density penalty. `train --hf-model --variant sieve` then fine-tunes and
    saves a checkpoint that reads back."""
    pytest.importorskip("transformers")
    env = _tree_with(tmp_path, "sieve")
    done = subprocess.run([sys.executable, "-c", HF_SCRIPT, str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["machinery"] == "SieveGates"
    assert facts["max_error"] < 1e-5
    assert facts["all_open"]
    assert 0.0 < facts["density"] <= 1.0 and facts["gates_shape"] == [4, 8]
    assert facts["gate_gradient"]

    trained = subprocess.run(
        [sys.executable, "-m", "attndeploy", "train", "--hf-model", "pre", "--variant", "sieve",
         "--data", "data.jsonl", "--max-seq", "16", "--steps", "3", "--batch-size", "8",
         "--out", "ckpt", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    read = subprocess.run(
        [sys.executable, "-c", "import sys; from attndeploy.checkpoint import read_checkpoint; "
         "c = read_checkpoint(sys.argv[1]); print(c.model_config.variant, c.model.is_gated)",
         str(tmp_path / "ckpt")], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300)
    assert read.returncode == 0, read.stderr[-3000:]
    assert read.stdout.split() == ["sieve", "True"]
