"""Fixtures of the Hugging Face integration tests (the models themselves: `hf_models.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_and_a_seed():
    """One intra-op thread (tiny models; see tests/conftest.py) and a fixed seed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


# Converted models with a WordPiece tokenizer, exported once per session (a few seconds each):
# EA-BERT and a GA-Net DistilBERT, as docs/hugging-face.md's path takes them.
TEXT_MODELS = {"ea_bert": ("bert", "evolving"), "ga_distilbert": ("distilbert", "ganet")}


@dataclass(frozen=True)
class HFTextExport:
    checkpoint: Path
    path: Path  # model.onnx


@pytest.fixture(scope="session")
def hf_text_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HFTextExport]:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from attndeploy.export.exporter import export_checkpoint

    from .hf_models import save_text_checkpoint

    root = tmp_path_factory.mktemp("hf_text_exports")
    exports = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, (model_type, variant) in TEXT_MODELS.items():
            torch.manual_seed(0)
            checkpoint = save_text_checkpoint(root / name, model_type, variant, layers=3)
            exports[name] = HFTextExport(
                checkpoint, export_checkpoint(checkpoint, root / f"{name}.onnx").path)
    finally:
        torch.set_num_threads(threads)
    return exports
