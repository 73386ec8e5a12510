"""`attndeploy train`: train a model on a built-in task or a JSONL file and save a checkpoint."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import (
    AuxNetwork,
    Family,
    ForceFlag,
    GateMode,
    GateRelaxation,
    JsonFlag,
    QVIForm,
    SeedOption,
    VariantOption,
    readable_text_file,
    shared,
)
from attndeploy.cli.output import console, print_json, summary_lines
from attndeploy.config import ModelConfig
from attndeploy.training.config import (
    DEFAULT_CHECKPOINT_DIR,
    EVAL_FRACTION,
    N_EVAL,
    N_TRAIN,
    PRETRAINED_DEFAULTS,
    REAL_TEXT_DEFAULTS,
    TASK_DEFAULTS,
    TrainConfig,
)
from attndeploy.variants.evolving.config import EvolvingConfig
from attndeploy.variants.ganet.config import GANetConfig
from attndeploy.variants.qvi.config import QVIConfig

_TASK, _DATA = TASK_DEFAULTS, REAL_TEXT_DEFAULTS


def _ganet(field: str) -> Any:
    return field_default(GANetConfig, field)


def _ganet_default(defaults: Any, field: str) -> Any:
    """GA-Net's default for one kind of data: the preset's override, else the config's."""
    return defaults.options_for("ganet").get(field, _ganet(field))


def _evolving(field: str) -> Any:
    return field_default(EvolvingConfig, field)


def _ganet_help(field: str) -> str:
    return _both(_ganet_default(_TASK, field), _ganet_default(_DATA, field),
                 _ganet_default(PRETRAINED_DEFAULTS, field))


def _evolving_default(defaults: Any, field: str) -> Any:
    return defaults.options_for("evolving").get(field, _evolving(field))


def _evolving_help(field: str) -> str:
    return _both(_evolving_default(_TASK, field), _evolving_default(_DATA, field),
                 _evolving_default(PRETRAINED_DEFAULTS, field))


def _option_fields() -> str:
    """Every registered variant's config fields and defaults, read from its dataclass."""
    from attndeploy.variants.registry import variant_specs

    listed = []
    for spec in variant_specs():
        if spec.config is not None:
            fields = ", ".join(f"{f.name}={_show(field_default(spec.config, f.name))}"
                               for f in dataclasses.fields(spec.config))
            listed.append(f"{spec.name}: {fields}")
    return "; ".join(listed)


def _model_default(key: str) -> str:
    return _both(_TASK.model[key], _DATA.model[key])


def _show(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _both(task: Any, data: Any, pretrained: Any = None) -> str:
    """The help text's note of a default that depends on the data, and with `pretrained` on
    fine-tuning pretrained weights (`--hf-model` on a folder with model.safetensors)."""
    if task == data:
        note = f"{_show(task)}"
    else:
        note = f"{_show(task)} for a task; {_show(data)} for --data"
    if pretrained is not None:
        note += f"; {_show(pretrained)} fine-tuning pretrained weights"
    return f"[default: {note}]"


_PRE = PRETRAINED_DEFAULTS.training


def _three(field: str) -> str:
    """`_both` for a TrainConfig field of all three presets."""
    return _both(getattr(_TASK.training, field), getattr(_DATA.training, field),
                 getattr(_PRE, field))

def command(
    variant: VariantOption = field_default(ModelConfig, "variant"),
    out: Annotated[
        Path, shared("--out", "The checkpoint directory.")
    ] = Path(DEFAULT_CHECKPOINT_DIR),
    task: Annotated[
        str | None, typer.Option(help="Built-in task (sparse_evidence, tagging).")
    ] = None,
    data: Annotated[
        Path | None, shared("--data", "Trained on instead of --task.",
                            callback=readable_text_file)
    ] = None,
    family: Annotated[
        Family, typer.Option(help="Model family.")  # type: ignore[valid-type]
    ] = Family(field_default(ModelConfig, "family")),
    d_model: Annotated[int | None, typer.Option(
        help=f"Model width. {_model_default('d_model')}")] = None,
    heads: Annotated[int | None, typer.Option(
        help=f"Attention heads. {_model_default('n_heads')}")] = None,
    layers: Annotated[int | None, typer.Option(
        help=f"Encoder layers. {_model_default('n_layers')}")] = None,
    d_ff: Annotated[int | None, typer.Option(
        help=f"Feed-forward width. {_model_default('d_ff')}")] = None,
    max_seq: Annotated[int, shared("--max-seq")] = field_default(ModelConfig, "max_seq"),
    steps: Annotated[int | None, shared(
        "--steps", f"{_both(_TASK.training.steps, _DATA.training.steps, _PRE.steps)}"
    )] = None,
    max_epochs: Annotated[int | None, typer.Option(
        help="The most passes over the training data. "
             f"{_both(_TASK.training.max_epochs, _DATA.training.max_epochs, _PRE.max_epochs)}"
    )] = None,
    patience: Annotated[int | None, typer.Option(
        help="Stop after this many evaluations without a better validation score; 0 never "
             f"stops early. {_both(_TASK.training.patience or 0, _DATA.training.patience, 0)}"
    )] = None,
    eval_every: Annotated[int, typer.Option(
        help="Evaluate for model selection every N steps; 0: after every epoch.")
    ] = field_default(TrainConfig, "eval_every"),
    batch_size: Annotated[
        int, shared("--batch-size", "(Examples per step.)")
    ] = field_default(TrainConfig, "batch_size"),
    lr: Annotated[float | None, typer.Option(
        "--lr", help="Peak learning rate (AdamW). "
                     f"{_three('learning_rate')}"
    )] = None,
    new_lr: Annotated[float | None, typer.Option(
        "--new-lr", help="--hf-model on pretrained weights: peak learning rate of the "
                         "parameters the conversion adds (the variant's own: QVI's maps, "
                         "Evolving Attention's convs, GA-Net's gate network). [default: "
                         f"{PRETRAINED_DEFAULTS.training.new_learning_rate:g}: at the "
                         "encoder's rate they barely leave their warm start]")
    ] = None,
    weight_decay: Annotated[float | None, typer.Option(
        help="AdamW weight decay. "
             f"{_three('weight_decay')}")] = None,
    dropout: Annotated[float | None, typer.Option(
        help="Dropout on the attention and feed-forward outputs. "
             f"{_both(_TASK.model['dropout'], _DATA.model['dropout'])}; --hf-model: the "
             "model's own (its config's hidden_dropout_prob)")] = None,
    word_dropout: Annotated[float | None, typer.Option(
        help="Chance that a training token becomes <unk>. "
             f"[default: {_TASK.training.word_dropout:g} for a task; "
             f"{_DATA.training.word_dropout:g} for --data, "
             f"{_DATA.training_for('ganet').word_dropout:g} for GA-Net on --data (its gates "
             "already drop words); 0 with --hf-model]")] = None,
    label_smoothing: Annotated[float | None, typer.Option(
        help="Label smoothing of the training loss. "
             f"{_three('label_smoothing')}"
    )] = None,
    embedding_init: Annotated[float | None, typer.Option(
        help="Draw token and position embeddings from N(0, this^2) (0: PyTorch's N(0, 1)). "
             f"{_both(_TASK.training.embedding_init, _DATA.training.embedding_init)}"
    )] = None,
    weight_average: Annotated[float | None, typer.Option(
        help="Evaluate and keep a moving average of the weights with this decay (0: off). "
             f"{_three('weight_average')}"
    )] = None,
    refit: Annotated[bool | None, typer.Option(
        "--refit/--no-refit",
        help="After choosing the best epoch on the validation split, train a fresh model on "
             f"the training and validation examples for that many epochs + "
             f"{_DATA.training.refit_extra_epochs}, and save that one. "
             f"{_both(_TASK.training.refit, _DATA.training.refit)}"
    )] = None,
    seed: SeedOption = field_default(TrainConfig, "seed"),
    n_train: Annotated[int, typer.Option(help="Training examples of a built-in task.")] = N_TRAIN,
    n_eval: Annotated[int, typer.Option(help="Held-out examples of a built-in task.")] = N_EVAL,
    n_val: Annotated[int | None, typer.Option(
        help="Validation examples of a built-in task, for model selection; 0: select on the "
             f"held-out set. [default: {_TASK.n_val}]")] = None,
    eval_fraction: Annotated[
        float, typer.Option(help="Held-out share of a JSONL file.")
    ] = EVAL_FRACTION,
    val_fraction: Annotated[float | None, typer.Option(
        help="Share of a JSONL file's training part kept apart for model selection; 0: select "
             f"on the held-out part. [default: {_DATA.val_fraction:g}; "
             f"{PRETRAINED_DEFAULTS.val_fraction:g} fine-tuning pretrained weights, which keep "
             "the last step's weights]")] = None,
    min_freq: Annotated[int | None, typer.Option(
        help="JSONL: words seen fewer times in the training part encode as <unk>. "
             f"[default: {_DATA.min_freq}]")] = None,
    truncate: Annotated[bool, shared(
        "--truncate", "(JSONL; --hf-model: word pieces.)")] = False,
    max_seconds: Annotated[
        float | None, typer.Option(help="Stop training after this many seconds.")
    ] = None,
    qvi_form: Annotated[
        QVIForm, typer.Option(help="QVI form.")
    ] = QVIForm(field_default(QVIConfig, "form")),
    aux: Annotated[AuxNetwork | None, typer.Option(
        help="GA-Net auxiliary network (fine-tuning a Hugging Face model: "
             f"{_ganet('aux')} unless given). "
             f"{_both(_ganet_default(_TASK, 'aux'), _ganet_default(_DATA, 'aux'))}"
    )] = None,
    temperature: Annotated[float | None, typer.Option(
        help=f"GA-Net Gumbel-sigmoid temperature. {_ganet_help('temperature')}"
    )] = None,
    density_weight: Annotated[
        float, typer.Option(help="GA-Net density penalty weight (lambda); with a density "
                            "target, its starting value.")
    ] = _ganet("density_weight"),
    density_target: Annotated[float | None, typer.Option(
        help="GA-Net: the most held-out gate density (a ceiling); the penalty weight adapts "
             "during training. 0: no target, a fixed --density-weight. "
             f"{_both(_TASK.training.density_target, _DATA.training.density_target)}")] = None,
    density_calibrate: Annotated[float | None, typer.Option(
        help="GA-Net: at the end, move the gate threshold so that the validation density "
             "(without a validation split, the training texts') is this. 0: leave the "
             "threshold at 0. "
             f"{_both(_TASK.training.density_calibrate, _DATA.training.density_calibrate)}"
    )] = None,
    distill: Annotated[float | None, typer.Option(
        help="GA-Net: first train its dense-gate run (no density penalty), then learn from "
             "its soft predictions with this weight beside the labels' (1 - this). 0: off. "
             f"{_both(_TASK.training_for('ganet').distill, _DATA.training_for('ganet').distill)}"
    )] = None,
    gate_mode: Annotated[
        GateMode, typer.Option(help="GA-Net eval gates.")
    ] = GateMode(_ganet("gate_mode")),
    straight_through: Annotated[
        bool, typer.Option(help="GA-Net straight-through hard gates in training.")
    ] = _ganet("straight_through"),
    relaxation: Annotated[GateRelaxation | None, typer.Option(
        help="GA-Net training gates: the paper's binary concrete, or hard concrete (closed "
             "gates exactly 0, as at inference). "
             f"{_both(_ganet_default(_TASK, 'relaxation'), _ganet_default(_DATA, 'relaxation'))}"
    )] = None,
    alpha: Annotated[float | None, typer.Option(
        help="Evolving: weight of the previous logits. "
             f"{_evolving_help('alpha')}"
    )] = None,
    beta: Annotated[float | None, typer.Option(
        help="Evolving: weight of the conv branch. "
             f"{_evolving_help('beta')}"
    )] = None,
    negative_slope: Annotated[
        float, typer.Option(help="Evolving: LeakyReLU slope.")
    ] = _evolving("negative_slope"),
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="A field of the variant's own config as NAME=VALUE "
                     "(repeatable), for any registered variant, e.g. --option pairwise_chunk=32; "
                     "typed and checked by its config. The fields and their defaults (a "
                     f"preset may set others, as the named options say): {_option_fields()}."),
    ] = None,
    hf_model: Annotated[Path | None, typer.Option(
        "--hf-model", help="Fine-tune a Hugging Face BERT, RoBERTa or DistilBERT (a local "
        "save_pretrained folder or a config JSON; nothing is downloaded) with this variant.")
    ] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Train a model of one variant and save a checkpoint (config.json + model.safetensors).

    Defaults depend on what is trained: a built-in task; real text (--data), regularised for
    small models trained from scratch; or pretrained weights (--hf-model on a folder with
    model.safetensors), which fine-tune with the BERT-family recipe (AdamW 5e-5, warm-up over
    10 % of the steps then linear decay, 4 epochs, the model's own dropout, no word dropout,
    label smoothing, weight average or selection: the last step is kept) because the --data
    defaults destroy pretrained weights. A model built from a config keeps the --data ones.
    """
    from attndeploy.config import EvolvingConfig, GANetConfig, ModelConfig, QVIConfig
    from attndeploy.configbase import with_options
    from attndeploy.errors import CheckpointError, ConfigError
    from attndeploy.fsutil import check_output_dir, check_replaceable
    from attndeploy.train import load_training_data, train_checkpoint
    from attndeploy.variants.registry import variant_spec

    if task is not None and data is not None:
        raise ConfigError("give either --task or --data, not both")
    check_output_dir(out)  # a file in the way, a read-only place: refused before training
    check_replaceable(out, force=force, error=CheckpointError)
    defaults = _DATA if data is not None else _TASK  # what an option left out means
    if hf_model is not None:
        from attndeploy.integrations.hf_data import holds_weights

        if holds_weights(hf_model):
            defaults = PRETRAINED_DEFAULTS
    if family is Family.bilstm:
        aux = AuxNetwork.bilstm  # the paper's model always gates with a BiLSTM
    elif aux is None:  # the preset's network is measured on the built-in Transformer only
        aux = AuxNetwork(_ganet("aux") if hf_model is not None
                         else _ganet_default(defaults, "aux"))
    ganet = GANetConfig(
        aux=aux.value, density_weight=density_weight,
        temperature=_ganet_default(defaults, "temperature") if temperature is None else temperature,
        gate_mode=gate_mode.value, straight_through=straight_through,
        relaxation=(_ganet_default(defaults, "relaxation") if relaxation is None
                    else relaxation.value),
        gated_layers=_ganet_default(defaults, "gated_layers"),  # `--option` changes it
    )
    evolving = EvolvingConfig(
        alpha=_evolving_default(defaults, "alpha") if alpha is None else alpha,
        beta=_evolving_default(defaults, "beta") if beta is None else beta,
        negative_slope=negative_slope,
        evolving_layers=_evolving_default(defaults, "evolving_layers"))  # `--option` changes it
    qvi = QVIConfig(form=qvi_form.value)
    sub_configs = {"qvi": qvi, "ganet": ganet, "evolving": evolving}  # the named options above
    if option:
        spec = variant_spec(variant)
        if spec.config is None:
            raise ConfigError(f"variant {spec.name!r} has no options")
        base = sub_configs.get(spec.name) or spec.config(**defaults.options_for(spec.name))
        sub_configs[spec.name] = with_options(base, option, spec.name)
    preset = defaults.training_for(variant)

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    if hf_model is not None:
        from attndeploy.cli.train_hf import train_hf_command

        if refit:
            raise ConfigError("--refit applies to the built-in models; fine-tuning a Hugging "
                              "Face model keeps the selected weights")
        train_hf_command(
            hf_model=hf_model, variant=variant,
            variant_config=sub_configs.get(variant), out=out, task=task, data=data,
            max_seq=max_seq, steps=steps, batch_size=batch_size,
            lr=lr, seed=seed, n_train=n_train, n_eval=n_eval,
            eval_fraction=eval_fraction, max_seconds=max_seconds, force=force,
            json_output=json_output, max_epochs=max_epochs, patience=patience,
            eval_every=eval_every, weight_decay=weight_decay, label_smoothing=label_smoothing,
            word_dropout=word_dropout, weight_average=weight_average,
            density_target=density_target, density_calibrate=density_calibrate, n_val=n_val,
            val_fraction=val_fraction, truncate=truncate, new_lr=new_lr, distill=distill,
        )
        return

    train_config = dataclasses.replace(
        preset, steps=pick(steps, preset.steps), max_epochs=pick(max_epochs, preset.max_epochs),
        patience=pick(patience, preset.patience) or None, eval_every=eval_every,
        batch_size=batch_size, learning_rate=pick(lr, preset.learning_rate),
        weight_decay=pick(weight_decay, preset.weight_decay),
        word_dropout=pick(word_dropout, preset.word_dropout),
        label_smoothing=pick(label_smoothing, preset.label_smoothing),
        embedding_init=pick(embedding_init, preset.embedding_init),
        weight_average=pick(weight_average, preset.weight_average), seed=seed,
        refit=pick(refit, preset.refit),
        max_seconds=max_seconds,
        density_target=pick(density_target, preset.density_target) or None,
        density_calibrate=pick(density_calibrate, preset.density_calibrate) or None,
        distill=pick(distill, preset.distill),
    )
    given = {"d_model": d_model, "n_heads": heads, "n_layers": layers, "d_ff": d_ff,
             "dropout": dropout}
    architecture = {**defaults.model, "max_seq": max_seq,
                    **{key: value for key, value in given.items() if value is not None}}
    # Validate the architecture before loading data (vocab and labels are filled in below).
    ModelConfig(vocab_size=2, num_labels=2, variant=variant, family=family.value,
                **architecture, **sub_configs)
    dataset = load_training_data(
        task=task, data_file=data, seed=seed, n_train=n_train, n_eval=n_eval,
        eval_fraction=eval_fraction, max_seq=max_seq,
        val_fraction=pick(val_fraction, defaults.val_fraction), n_val=pick(n_val, defaults.n_val),
        truncate=truncate, min_freq=pick(min_freq, defaults.min_freq),
    )
    model_config = ModelConfig(
        vocab_size=len(dataset.tokenizer), num_labels=len(dataset.label_names),
        variant=variant, family=family.value, head=dataset.head, **architecture,
        **sub_configs,
    )
    result = train_checkpoint(
        model_config, dataset, train_config, out, force=force, progress=not json_output
    )
    if json_output:
        print_json({"checkpoint": str(out), "metrics": result.metrics, "training": result.summary})
        return
    console.print(summary_lines(out, result.metrics, result.summary))
