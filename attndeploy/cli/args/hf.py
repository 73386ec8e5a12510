"""The Hugging Face source's option: `--hf-model`, a BERT-family encoder to fine-tune."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from attndeploy.cli.args.base import OptionGroup
from attndeploy.cli.options import shared


class HFSourceArgs(OptionGroup):
    """A Hugging Face model to fine-tune with the variant instead of a built-in model."""

    @staticmethod
    def options(
        hf_model: Annotated[Path | None, shared(
            "--hf-model", "fine-tune it with this variant: a BERT, RoBERTa or DistilBERT (a "
            "save_pretrained folder or a config JSON), or, on {\"text\"} lines, a LLaMA-family "
            "decoder (a save_pretrained folder or a .gguf file).")
        ] = None,
    ) -> None:
        """The Hugging Face source's option."""

    def parse(self, values: Mapping[str, Any]) -> Path | None:
        return values["hf_model"]

    @staticmethod
    def pretrained(hf_model: Path | None) -> bool:
        """Whether `hf_model` holds weights (fine-tuned with the pretrained preset)."""
        if hf_model is None:
            return False
        from attndeploy.integrations.hf_data import holds_weights

        return holds_weights(hf_model)
