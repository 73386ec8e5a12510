"""`attndeploy train`: train a model on a built-in task or a JSONL file and save a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import (
    AuxNetwork,
    Family,
    ForceFlag,
    GateMode,
    JsonFlag,
    QVIForm,
    SeedOption,
    Variant,
)
from attndeploy.cli.output import console, print_json


def command(
    variant: Annotated[Variant, typer.Option(help="Attention variant.")] = Variant.standard,
    out: Annotated[Path, typer.Option("--out", help="Checkpoint directory to write.")] = Path(
        "runs/model"
    ),
    task: Annotated[
        str | None, typer.Option(help="Built-in task (sparse_evidence, tagging).")
    ] = None,
    data: Annotated[
        Path | None, typer.Option("--data", help="JSONL file of {text, label}, instead of --task.")
    ] = None,
    family: Annotated[Family, typer.Option(help="Model family.")] = Family.transformer,
    d_model: Annotated[int, typer.Option(help="Model width.")] = 64,
    heads: Annotated[int, typer.Option(help="Attention heads.")] = 4,
    layers: Annotated[int, typer.Option(help="Encoder layers.")] = 2,
    d_ff: Annotated[int, typer.Option(help="Feed-forward width.")] = 128,
    max_seq: Annotated[int, typer.Option(help="Longest sequence the model takes.")] = 128,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 300,
    batch_size: Annotated[int, typer.Option(help="Examples per step.")] = 32,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate (AdamW).")] = 3e-3,
    seed: SeedOption = 0,
    n_train: Annotated[int, typer.Option(help="Training examples of a built-in task.")] = 4000,
    n_eval: Annotated[int, typer.Option(help="Held-out examples of a built-in task.")] = 1000,
    eval_fraction: Annotated[float, typer.Option(help="Held-out share of a JSONL file.")] = 0.2,
    max_seconds: Annotated[
        float | None, typer.Option(help="Stop training after this many seconds.")
    ] = None,
    qvi_form: Annotated[QVIForm, typer.Option(help="QVI form.")] = QVIForm.pooled,
    aux: Annotated[AuxNetwork, typer.Option(help="GA-Net auxiliary network.")] = AuxNetwork.mlp,
    temperature: Annotated[float, typer.Option(help="GA-Net Gumbel-sigmoid temperature.")] = 1.0,
    density_weight: Annotated[
        float, typer.Option(help="GA-Net density penalty weight (lambda).")
    ] = 4e-4,
    gate_mode: Annotated[GateMode, typer.Option(help="GA-Net eval gates.")] = GateMode.threshold,
    straight_through: Annotated[
        bool, typer.Option(help="GA-Net straight-through hard gates in training.")
    ] = False,
    alpha: Annotated[float, typer.Option(help="Evolving: weight of the previous logits.")] = 0.5,
    beta: Annotated[float, typer.Option(help="Evolving: weight of the conv branch.")] = 1.0,
    negative_slope: Annotated[float, typer.Option(help="Evolving: LeakyReLU slope.")] = 0.0,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="A field of the variant's own config as NAME=VALUE "
                     "(repeatable), for any registered variant, e.g. --option pairwise_chunk=32."),
    ] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Train a model of one variant and save a checkpoint (config.json + model.safetensors)."""
    from attndeploy.config import EvolvingConfig, GANetConfig, ModelConfig, QVIConfig
    from attndeploy.configbase import with_options
    from attndeploy.errors import ConfigError
    from attndeploy.fsutil import check_output_dir
    from attndeploy.train import TrainConfig, load_training_data, train_checkpoint
    from attndeploy.variants.registry import variant_spec

    if task is not None and data is not None:
        raise ConfigError("give either --task or --data, not both")
    check_output_dir(out)  # a file in the way, a read-only place: refused before training
    if family is Family.bilstm:
        aux = AuxNetwork.bilstm  # the paper's model always gates with a BiLSTM
    ganet = GANetConfig(
        aux=aux.value, temperature=temperature, density_weight=density_weight,
        gate_mode=gate_mode.value, straight_through=straight_through,
    )
    evolving = EvolvingConfig(alpha=alpha, beta=beta, negative_slope=negative_slope)
    qvi = QVIConfig(form=qvi_form.value)
    sub_configs = {"qvi": qvi, "ganet": ganet, "evolving": evolving}  # the named options above
    if option:
        spec = variant_spec(variant.value)
        if spec.config is None:
            raise ConfigError(f"variant {spec.name!r} has no options")
        base = sub_configs.get(spec.name) or spec.config()
        sub_configs[spec.name] = with_options(base, option, spec.name)
    train_config = TrainConfig(
        steps=steps, batch_size=batch_size, learning_rate=lr, seed=seed, max_seconds=max_seconds
    )
    # Validate the architecture before loading data (vocab and labels are filled in below).
    ModelConfig(vocab_size=2, num_labels=2, variant=variant.value, family=family.value,
                d_model=d_model, n_heads=heads, n_layers=layers, d_ff=d_ff, max_seq=max_seq,
                **sub_configs)
    dataset = load_training_data(
        task=task, data_file=data, seed=seed, n_train=n_train, n_eval=n_eval,
        eval_fraction=eval_fraction, max_seq=max_seq,
    )
    model_config = ModelConfig(
        vocab_size=len(dataset.tokenizer), num_labels=len(dataset.label_names),
        variant=variant.value, family=family.value, head=dataset.head, d_model=d_model,
        n_heads=heads, n_layers=layers, d_ff=d_ff, max_seq=max_seq, **sub_configs,
    )
    result = train_checkpoint(
        model_config, dataset, train_config, out, force=force, progress=not json_output
    )
    if json_output:
        print_json({"checkpoint": str(out), "metrics": result.metrics, "training": result.summary})
        return
    metrics = ", ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.metrics.items()
    )
    console.print(f"saved [bold]{out}[/] ({result.summary['seconds']:.1f} s): {metrics}")
