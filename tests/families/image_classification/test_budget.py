"""GA-Net's per-image budget in the image models (`ganet_budget`): every image keeps exactly
ceil(b T) positions, the same in every layer; kept positions attend among themselves, the others
skip the attention sub-layer; training computes the inference function and teaches the gate
network; the export holds one BudgetGatedAttention node per layer and validates."""

from __future__ import annotations

import json

import pytest
import torch

from attndeploy import debug
from attndeploy.errors import ConfigError
from attndeploy.families.image_classification import checks
from attndeploy.families.image_classification.training import train_folder
from attndeploy.models.vision.build import build_model
from attndeploy.models.vision.checkpoint import save_image_model
from attndeploy.nn import BudgetGatedAttention, GatedAttention
from attndeploy.variants.ganet.reference import budget_count
from tests.families.image_classification.images import (
    ARCHITECTURES,
    BUDGET,
    TINY,
    tiny_config,
    write_folder,
)

pytestmark = pytest.mark.usefixtures("torch_defaults")


def _budget_model(architecture: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(tiny_config(architecture, "ganet", ganet_budget=BUDGET))


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_image_keeps_exactly_its_budget_in_every_layer(architecture, monkeypatch):
    model = _budget_model(architecture).eval()
    layers = [m for m in model.modules() if isinstance(m, (BudgetGatedAttention,
                                                           GatedAttention))]
    assert len(layers) == 3 and all(type(layer) is BudgetGatedAttention for layer in layers)
    seen = []
    for layer in layers:
        original = layer.forward

        def spy(x, mask, logits, original=original):
            y, gates = original(x, mask, logits)
            seen.append(gates)
            return y, gates

        monkeypatch.setattr(layer, "forward", spy)
    with torch.no_grad():
        out = model(torch.randn(6, 1, 8, 8))
    k = budget_count(BUDGET, model.config.positions)
    assert k == {"vit": 5, "aacnn": 2}[architecture]
    assert out["gates"].sum(-1).tolist() == [k] * 6
    assert all(torch.equal(gates, out["gates"]) for gates in seen)
    assert len({tuple(row.tolist()) for row in out["gates"]}) > 1  # chosen per image


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_kept_positions_attend_among_themselves_and_the_rest_output_zero(training):
    torch.manual_seed(0)
    layer = BudgetGatedAttention(16, 2, budget=0.5).train(training)
    x, logits = torch.randn(3, 10, 16), torch.randn(3, 10)
    with torch.no_grad():
        y, gates = layer(x, None, logits)
        assert gates.sum(-1).tolist() == [5, 5, 5]
        assert torch.equal(gates, logits >= logits.topk(5, dim=-1).values[:, -1:])
        assert (y[~gates] == 0).all()  # the output projection's bias included
        alone = layer.eval()  # the same weights, every position kept, over the kept rows only
        alone.budget = 1.0
        for b in range(3):
            kept = x[b][gates[b]][None]  # [1, 5, 16]
            expected, _ = alone(kept, None, torch.zeros(1, 5))
            assert torch.allclose(y[b][gates[b]], expected[0], atol=1e-6)


def test_training_computes_the_inference_function_and_teaches_the_gate_network():
    model = _budget_model("vit")
    images = torch.randn(4, 1, 8, 8)
    out = model(images, details=True)
    assert "density_penalty" not in out  # the density is the budget
    with torch.no_grad():
        again = model(images)["logits"]  # no logistic noise on the logits
        inference = model.eval()(images)["logits"]
    assert torch.equal(out["logits"].detach(), again)
    assert torch.allclose(out["logits"].detach(), inference, atol=1e-5)
    model.train()
    out["logits"].logsumexp(-1).sum().backward()
    gate_weight = model.gates.network.score.weight.grad
    assert gate_weight is not None and gate_weight.abs().sum() > 0


def test_images_are_classified_independently_of_their_batch():
    model = _budget_model("vit").eval()
    images = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        alone = torch.cat([model(images[i:i + 1])["logits"] for i in range(4)])
        together = model(images)["logits"]
    assert torch.allclose(alone, together, atol=1e-5)


@pytest.mark.parametrize("changes, message", [
    ({"ganet_budget": 0.0}, r"in \(0, 1\]; got 0.0"),
    ({"ganet_budget": 1.5}, r"in \(0, 1\]; got 1.5"),
    ({"ganet_budget": True}, r"in \(0, 1\]; got True"),
    ({"ganet_budget": "0.3"}, r"in \(0, 1\]; got '0.3'"),
    ({"ganet_budget": 0.3, "variant": "standard"}, "give variant 'ganet', not 'standard'"),
])
def test_a_budget_out_of_range_or_without_ganet_is_one_config_error(changes, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(**{"variant": "ganet", **changes})


def test_without_a_budget_the_content_gates_are_unchanged():
    model = build_model(tiny_config("vit", "ganet"))
    assert model.config.ganet_budget is None
    assert all(type(m) is GatedAttention for m in model.modules()
               if isinstance(m, (GatedAttention, BudgetGatedAttention)))
    assert "density_penalty" in model(torch.randn(2, 1, 8, 8), details=True)


@pytest.mark.parametrize("architecture", [
    "vit", pytest.param("aacnn", marks=pytest.mark.slow)])
def test_a_budget_model_exports_one_node_per_layer_validates_and_compares(architecture, tmp_path):
    folder = write_folder(tmp_path / "data", per_class=3)
    from attndeploy.data.images import load_image_folder, measure_preprocessing

    images = load_image_folder(folder)
    model = _budget_model(architecture).eval()
    checkpoint = save_image_model(model, images.class_names,
                                  measure_preprocessing(images.pixels), tmp_path / "ckpt")
    summary = checks.export_checkpoint(checkpoint, tmp_path / "model.onnx")
    assert summary["custom_nodes"] == {"BudgetGatedAttention": 3}
    assert summary["outputs"] == ["logits", "gates"]
    report = checks.validate_checkpoint(checkpoint, tmp_path / "model.onnx")
    assert report.passed, report.failure()
    compared = debug.compare_checkpoint(checkpoint, tmp_path / "model.onnx", shapes="1,3")
    assert compared.passed, compared.verdict
    assert [layer.op_type for layer in compared.layers].count("BudgetGatedAttention") == 3


def test_train_folder_takes_the_budget_and_reports_its_density(tmp_path):
    folder = write_folder(tmp_path / "data", per_class=4)
    result = train_folder(folder, model={"variant": "ganet", **TINY, "ganet_budget": BUDGET},
                          training={"steps": 3, "batch_size": 8}, eval_fraction=0.25,
                          out=tmp_path / "ckpt")
    raw = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert raw["model"]["ganet_budget"] == BUDGET
    assert result.metrics["density"] == pytest.approx(5 / 16)
