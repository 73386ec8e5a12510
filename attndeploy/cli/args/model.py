"""The model's options: its variant, architecture (`ModelConfig.family`) and sizes
(`ModelConfig`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from attndeploy.cli.args.base import OptionGroup
from attndeploy.cli.args.notes import DATA, TASK, by_data
from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import Architecture, VariantOption, shared
from attndeploy.config import ModelConfig


def _size(key: str) -> str:
    return by_data(TASK.model[key], DATA.model[key])


# option -> the ModelConfig field it sets (each None: the preset's)
SIZES = {"d_model": "d_model", "heads": "n_heads", "layers": "n_layers", "d_ff": "d_ff",
         "dropout": "dropout", "head": "tag_head", "char_cnn": "char_cnn",
         "attention": "attention", "ganet_budget": "ganet_budget"}


@dataclass(frozen=True)
class Model:
    variant: str
    family: str  # the architecture (`--architecture`), stored as ModelConfig.family
    max_seq: int  # the one given, else ModelConfig's default
    sizes: Mapping[str, Any]  # the ModelConfig fields given
    max_seq_given: bool = True  # False: --max-seq left out (a --hf-model decoder keeps its own)

    def architecture(self, defaults: Any) -> dict[str, Any]:
        """The ModelConfig fields of its architecture: the preset's, then those given."""
        return {**defaults.model, "max_seq": self.max_seq, **self.sizes}


class ModelArgs(OptionGroup):
    """The model: its attention variant, architecture and sizes."""

    @staticmethod
    def options(
        variant: VariantOption = field_default(ModelConfig, "variant"),
        architecture: Annotated[
            Architecture, typer.Option(  # type: ignore[valid-type]
                help="Model architecture: the encoder under the head (old name --family; "
                     "the kind of model is --model-family).")
        ] = Architecture(field_default(ModelConfig, "family")),
        d_model: Annotated[int | None, typer.Option(
            help=f"Model width. {_size('d_model')}")] = None,
        heads: Annotated[int | None, typer.Option(
            help=f"Attention heads. {_size('n_heads')}")] = None,
        layers: Annotated[int | None, typer.Option(
            help=f"Encoder layers. {_size('n_layers')}")] = None,
        d_ff: Annotated[int | None, typer.Option(
            help=f"Feed-forward width. {_size('d_ff')}")] = None,
        dropout: Annotated[float | None, typer.Option(
            help="Dropout on the attention and feed-forward outputs. "
                 f"{_size('dropout')}; --hf-model: the model's own (its config's "
                 "hidden_dropout_prob)")] = None,
        max_seq: Annotated[int | None, shared(
            "--max-seq", "The longest sequence (tokens) the model takes [default: "
                         f"{field_default(ModelConfig, 'max_seq')}; a --hf-model decoder: its "
                         "own context].")] = None,
        char_cnn: Annotated[int | None, typer.Option(
            help="Width of a convolution over neighbouring tokens' embeddings before the "
                 "Transformer (odd; the CNN-Transformer of Chinese NER). Default none.")] = None,
        attention: Annotated[bool | None, typer.Option(
            "--attention/--no-attention",
            help="An image model (--data DIR) with or without its attention: --no-attention "
                 "trains the same network with attention removed, the baseline beside the "
                 "variants (its --variant is standard). Default: with.")] = None,
        ganet_budget: Annotated[float | None, typer.Option(
            help="A GA-Net image model (--data DIR, --variant ganet): keep this share of every "
                 "image's patches (0 < b <= 1; the largest gate logits, the same in every "
                 "layer), so the attention work follows the budget. Default: content gates.")
        ] = None,
        head: Annotated[str | None, typer.Option(
            "--head", help="A tagger's decoder: softmax (each token's argmax) or crf (a "
                           "linear-chain CRF, Viterbi). Default softmax.")] = None,
    ) -> None:
        """The model's options."""

    def parse(self, values: Mapping[str, Any]) -> Model:
        return Model(variant=values["variant"], family=values["architecture"].value,
                     max_seq=(field_default(ModelConfig, "max_seq") if values["max_seq"] is None
                              else values["max_seq"]),
                     max_seq_given=values["max_seq"] is not None,
                     sizes={field: values[option] for option, field in SIZES.items()
                            if values[option] is not None})
