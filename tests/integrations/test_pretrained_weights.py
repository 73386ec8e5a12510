"""A pretrained folder whose weights do not fit its config.json is refused by `train --hf-model`
(a missing or reshaped encoder tensor would start random), and transformers stays quiet only
while it loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import transformers  # noqa: E402

from attndeploy.errors import CheckpointError  # noqa: E402
from attndeploy.integrations.hf_train import train_hf_checkpoint  # noqa: E402
from attndeploy.train import TrainConfig  # noqa: E402

from .hf_models import pretrained_folder  # noqa: E402


def unfitting_folders(tmp_path: Path) -> dict[str, Path]:
    """Pretrained folders whose weights do not fit their config.json: one edited to another
    feed-forward width, one whose file lost an encoder tensor."""
    from safetensors.torch import load_file, save_file

    edited = pretrained_folder(tmp_path / "edited")
    config = json.loads((edited / "config.json").read_text())
    config["intermediate_size"] = 48  # 64 in the file
    (edited / "config.json").write_text(json.dumps(config))
    cut = pretrained_folder(tmp_path / "cut")
    tensors = load_file(str(cut / "model.safetensors"))
    del tensors["encoder.layer.1.attention.self.query.weight"]
    save_file(tensors, str(cut / "model.safetensors"), metadata={"format": "pt"})
    return {"edited": edited, "cut": cut}


@pytest.mark.parametrize(("folder", "lost", "first"), [
    ("edited", 6, "bert.encoder.layer.0.intermediate.dense.bias: [64] in the file, [48] in "
                  "config.json"),
    ("cut", 1, "bert.encoder.layer.1.attention.self.query.weight: not in the file")])
def test_weights_that_do_not_fit_their_config_are_refused_not_trained_from_random(
    tmp_path: Path, folder: str, lost: int, first: str
):
    source = unfitting_folders(tmp_path)[folder]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"w{i % 4} day", "label": i % 2})
                              for i in range(20)) + "\n")
    verbosity = transformers.logging.get_verbosity()
    with pytest.raises(CheckpointError) as caught:
        train_hf_checkpoint(source, "standard", tmp_path / "out", data_file=data, max_seq=16,
                            train_config=TrainConfig(steps=1), progress=False)
    assert transformers.logging.get_verbosity() == verbosity  # quiet only while loading
    said = str(caught.value)
    assert said.startswith(f"the weights in {source} do not fit its config.json: {lost} of the "
                           "encoder's ")
    assert f"tensors would start random ({first}" in said
    assert not (tmp_path / "out").exists()
