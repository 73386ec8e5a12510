"""quantize through the model family's checks part (`attndeploy.validate.families`): a tagging
model's texts are checked too, by tag agreement over their real tokens (its data files carry
no per-token gold, so no accuracy), where `--data` used to be refused for it."""

from __future__ import annotations

import json
from pathlib import Path

from attndeploy.quantize import QuantizeOptions, quantize_model
from tests.runtime.conftest import TEXTS


def test_a_tagging_model_s_texts_give_tag_agreement_per_real_token(text_exports,
                                                                    tmp_path: Path):
    source = text_exports.get("ganet_tagging").path
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    result = quantize_model(source, tmp_path / "int8.onnx",
                            QuantizeOptions(threads=1, min_agreement=0.5), data=data)
    assert result.passed, result.chosen
    grid, checked = result.chosen.grid, result.chosen.data
    assert grid.agreement == checked.agreement == "tag agreement"
    assert 0.5 <= grid.label_agreement <= 1.0 and 0.5 <= checked.label_agreement <= 1.0
    assert checked.texts == len(TEXTS)
    assert checked.fp32_accuracy is None and checked.accuracy_drop is None  # no gold tags
    assert checked.gates is not None and checked.gates >= len(TEXTS)  # GA-Net: real tokens
    record = result.to_dict()["candidates"][0]["data"]
    assert record["agreement"] == "tag agreement" and record["accuracy_drop"] is None
