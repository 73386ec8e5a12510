"""A real pretrained encoder end to end: all-MiniLM-L6-v2 (6 x 384, 12 heads, WordPiece),
warm-started into every variant, fine-tuned with `train --hf-model`'s defaults, exported,
validated, its held-out texts made again and int8 checked on them, packaged with its text model,
served, and asked over gRPC and in process: docs/hugging-face.md's "A real pretrained model", as
commands. Marked slow and integration; CI runs it (about 3 minutes on 2 cores)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.cli.test_train_cli import parse_json, run_cli  # noqa: E402
from tests.pretrained_model import extract_minilm  # noqa: E402
from tests.runtime.records import assert_same_record  # noqa: E402

VARIANTS = ("standard", "qvi", "ganet", "evolving")
GOOD = ["a wonderful sunny day", "great food and friendly people", "what a lovely gift",
        "the best concert of the year", "a happy and warm welcome", "brilliant work, thank you"]
BAD = ["a terrible rainy day", "awful food and rude people", "what a broken gift",
       "the worst concert of the year", "a sad and cold welcome", "dreadful work, no thanks"]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_minilm(tmp_path_factory.mktemp("minilm"))


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_converted_pretrained_model_starts_at_the_pretrained_function(minilm: Path,
                                                                          variant: str):
    """docs/variants.md §7: step 0 of a warm start computes what the pretrained model did, in
    eval mode, within 1e-5 (float rounding of a different operation order), padding included."""
    from transformers import BertForSequenceClassification

    from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer
    from attndeploy.integrations.transformers import convert
    from attndeploy.training.config import PRETRAINED_DEFAULTS

    torch.manual_seed(0)
    original = BertForSequenceClassification.from_pretrained(
        str(minilm), num_labels=3, local_files_only=True, use_safetensors=True).eval()
    options = PRETRAINED_DEFAULTS.options_for(variant)  # what `train --hf-model` converts with
    converted = convert(copy.deepcopy(original), variant, **options)
    tokenizer = WordPieceTokenizer.from_directory(minilm)
    ids, mask = (torch.from_numpy(a) for a in tokenizer.encode_batch(GOOD + BAD, max_seq=32))
    with torch.no_grad():
        want = original(input_ids=ids, attention_mask=mask).logits
        got = converted(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.integration
def test_minilm_trains_exports_validates_packages_serves_and_answers_text(minilm: Path,
                                                                          tmp_path: Path):
    from attndeploy.serving.server import TritonServer, free_ports

    rows = [{"text": t, "label": "good"} for t in GOOD] + [{"text": t, "label": "bad"}
                                                           for t in BAD]
    (tmp_path / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 4))
    trained = parse_json(run_cli(
        "train", "--hf-model", str(minilm), "--data", "reviews.jsonl", "--variant", "ganet",
        "--max-epochs", "1", "--max-seq", "32", "--out", "ckpt", "--json", cwd=tmp_path))
    used = trained["training"]["config"]
    assert (used["learning_rate"], used["schedule"]) == (5e-5, "linear")  # the recipe
    assert 0.0 <= trained["metrics"]["accuracy"] <= 1.0
    exported = parse_json(run_cli("export", "ckpt", "--out", "minilm.onnx", "--json",
                                  cwd=tmp_path))
    assert exported["custom_nodes"] == {"GatedAttention": 6}
    validated = run_cli("validate", "ckpt", "minilm.onnx", "--shapes", "1x1,2x9,3x32",
                        "--json-out", "parity.json", cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert json.loads((tmp_path / "parity.json").read_text())["passed"]
    packaged = parse_json(run_cli("package", "minilm.onnx", "--repo", "repo", "--model",
                                  "minilm", "--json", cwd=tmp_path))
    assert sorted(m["name"] for m in packaged["models"]) == ["minilm", "minilm_text"]
    checked = run_cli("check-repo", "--repo", "repo", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    texts = ["a lovely warm day", "rude and awful"]
    local = [json.loads(line) for line in run_cli(
        "predict", "minilm.onnx", "--text", texts[0], "--text", texts[1], "--jsonl",
        cwd=tmp_path).stdout.splitlines()]
    held = parse_json(run_cli("held-out", "ckpt", "--out", "held_out.jsonl", "--json",
                              cwd=tmp_path))
    assert held["examples"] == trained["metrics"]["examples"]
    quantized = parse_json(run_cli(  # one epoch on 48 texts: the labels are not the point
        "quantize", "minilm.onnx", "--out", "minilm.int8.onnx", "--data", "held_out.jsonl",
        "--min-agreement", "0", "--max-accuracy-drop", "1", "--json",
        cwd=tmp_path))
    (int8,) = quantized["candidates"]
    assert int8["data"]["texts"] == held["examples"] and int8["data"]["gate_flips"] == 0
    assert len(int8["gate_network"]) == 2
    assert quantized["options"]["activations"] == "per-row"  # docs/quantize.md: the default
    grpc, http, metrics = free_ports()
    with TritonServer(tmp_path / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                      models=["minilm", "minilm_text"], log_file=tmp_path / "server.log"
                      ) as server:
        for text, want in zip(texts, local, strict=True):
            answer = parse_json(run_cli("infer", "--model", "minilm_text", "--url",
                                        server.grpc_url, "--text", text, "--json",
                                        cwd=tmp_path))
            assert_same_record(answer, want, atol=1e-4)
