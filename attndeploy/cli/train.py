"""`attndeploy train`: train a model on a built-in task or a JSONL file and save a checkpoint.

Its options come in groups (`cli/args/`), each owned by what it configures: the model, the data,
the training recipe, the variants' own options (from their specs), the Hugging Face source and
the outputs. `command` composes them: each group parses its options into the library's config.
"""

from __future__ import annotations

from typing import Any

from attndeploy.cli.args.base import takes_options
from attndeploy.cli.args.data import DataArgs
from attndeploy.cli.args.hf import HFSourceArgs
from attndeploy.cli.args.model import ModelArgs
from attndeploy.cli.args.notes import DATA, PRETRAINED, TASK
from attndeploy.cli.args.outputs import OutputArgs
from attndeploy.cli.args.recipe import RecipeArgs
from attndeploy.cli.args.variants import VariantArgs
from attndeploy.cli.output import summary_lines  # noqa: F401  (tests read it from here)

MODEL, DATA_ARGS, RECIPE = ModelArgs(), DataArgs(), RecipeArgs()
VARIANTS, HF_SOURCE, OUTPUTS = VariantArgs(), HFSourceArgs(), OutputArgs()
GROUPS = (MODEL, OUTPUTS, DATA_ARGS, RECIPE, VARIANTS, HF_SOURCE)


@takes_options(*GROUPS)
def command(**values: Any) -> None:
    """Train a model of one variant and save a checkpoint (config.json + model.safetensors).

    Defaults depend on what is trained: a built-in task; real text (--data), regularised for
    small models trained from scratch; or pretrained weights (--hf-model on a folder with
    model.safetensors), which fine-tune with the BERT-family recipe (AdamW 5e-5, warm-up over
    10 % of the steps then linear decay, 4 epochs, the model's own dropout, no word dropout,
    label smoothing, weight average or selection: the last step is kept) because the --data
    defaults destroy pretrained weights. A model built from a config keeps the --data ones.
    """
    from attndeploy.config import ModelConfig
    from attndeploy.errors import ConfigError
    from attndeploy.train import train_checkpoint

    data = DATA_ARGS.parse(values)
    outputs = OUTPUTS.parse(values)
    outputs.check()  # a file in the way, a read-only place: refused before training
    hf_model = HF_SOURCE.parse(values)
    # what an option left out means
    defaults = (PRETRAINED if HF_SOURCE.pretrained(hf_model)
                else DATA if data.data is not None else TASK)
    model = MODEL.parse(values)
    sub_configs = VARIANTS.parse(values, defaults, variant=model.variant, family=model.family,
                                 converted=hf_model is not None)
    recipe = RECIPE.parse(values)

    if hf_model is not None and recipe.values["refit"]:
        raise ConfigError("--refit applies to the built-in models; fine-tuning a Hugging "
                          "Face model keeps the selected weights")
    if "attention" in model.sizes and (data.data is None or not data.data.is_dir()):
        raise ConfigError("--attention/--no-attention applies to image models (train --data "
                          "DIR on an image folder); a text model always has its attention")
    if "ganet_budget" in model.sizes and (data.data is None or not data.data.is_dir()
                                          or model.variant != "ganet"):
        raise ConfigError("--ganet-budget applies to GA-Net image models (train --data DIR on "
                          "an image folder with --variant ganet)")
    if data.data is not None and _trained_by_its_family(data, model, recipe, outputs, hf_model):
        return
    if hf_model is not None:
        from attndeploy.cli.train_hf import train_hf_command

        hf_recipe = {name: value for name, value in recipe.values.items()
                     if name not in ("refit", "embedding_init")}
        train_hf_command(
            hf_model=hf_model, variant=model.variant,
            variant_config=sub_configs.get(model.variant), out=outputs.out, task=data.task,
            data=data.data, max_seq=model.max_seq, n_train=data.n_train, n_eval=data.n_eval,
            eval_fraction=data.eval_fraction, force=outputs.force,
            json_output=outputs.json_output, n_val=data.n_val, val_fraction=data.val_fraction,
            truncate=data.truncate, **hf_recipe,
        )
        return

    train_config = recipe.train_config(defaults.training_for(model.variant))
    architecture = model.architecture(defaults)
    # Validate the architecture before loading data (vocab, labels and the data's head, which
    # a tag head needs, are filled in below).
    ModelConfig(vocab_size=2, num_labels=2, variant=model.variant, family=model.family,
                **{key: value for key, value in architecture.items() if key != "tag_head"},
                **sub_configs)
    dataset = data.load(defaults, seed=train_config.seed, max_seq=model.max_seq)
    constraints = {"crf_constraints": "scheme"} if architecture.get("tag_head") == "crf" else {}
    model_config = ModelConfig(
        vocab_size=len(dataset.tokenizer), num_labels=len(dataset.label_names),
        variant=model.variant, family=model.family, head=dataset.head, **architecture,
        **constraints, **sub_configs,
    )
    result = train_checkpoint(
        model_config, dataset, train_config, outputs.out, force=outputs.force,
        progress=not outputs.json_output,
    )
    outputs.report(result)


def _trained_by_its_family(data: Any, model: Any, recipe: Any, outputs: Any,
                           hf_model: Any = None) -> bool:
    """Hand the file to its family's `train_texts` hook (text-generation trains a decoder, no
    label head, or fine-tunes a pretrained one with --hf-model: cli/family_hooks.py); False
    when the family takes the common path (an encoder's --hf-model included)."""
    import dataclasses

    from attndeploy.cli.family_hooks import report_trained, training_hook

    if data.data.is_dir():  # an image folder: image-classification's `train_folder`
        _train_folder(data, model, recipe, outputs)
        return True
    from attndeploy.data.jsonl import read_jsonl_family
    from attndeploy.training.config import TrainConfig

    head, (texts, targets) = read_jsonl_family(data.data, data.model_family)
    train_texts = training_hook(head, "train_texts")
    if train_texts is None:
        return False
    from attndeploy.cli.args.recipe import FIELDS

    max_seq = model.max_seq
    pretrained = {}
    if hf_model is not None:
        import inspect

        from attndeploy.errors import ConfigError
        from attndeploy.integrations.hf_decoder import fine_tune_start

        if "start" not in inspect.signature(train_texts).parameters:
            raise ConfigError(f"--hf-model does not fine-tune a {head} model from these lines")
        if not model.max_seq_given:  # the pretrained model's own context
            max_seq = None
        pretrained = {"start": fine_tune_start(hf_model, model.variant, max_seq=max_seq),
                      "given": {FIELDS.get(name, name): value
                                for name, value in recipe.values.items() if value is not None}}
    paired = {"targets": targets} if any(t is not None for t in targets) else {}  # translation
    result = train_texts(
        texts, **paired, model={"variant": model.variant, "max_seq": max_seq, **model.sizes},
        training=dataclasses.asdict(recipe.train_config(TrainConfig())),
        eval_fraction=data.eval_fraction, out=outputs.out, force=outputs.force,
        progress=not outputs.json_output, **pretrained)
    report_trained(outputs.out, result.metrics, result.summary, outputs.json_output)
    return True


def _train_folder(data: Any, model: Any, recipe: Any, outputs: Any) -> None:
    """Hand a folder to the family that trains on one. Only the recipe values given pass on:
    the text recipe's defaults are not an image model's."""
    from attndeploy.cli.args.recipe import FIELDS
    from attndeploy.cli.family_hooks import folder_hook, report_trained
    from attndeploy.config import ModelConfig

    train_folder = folder_hook(data.model_family)
    given = {} if model.family == ModelConfig.family else {"architecture": model.family}
    result = train_folder(
        data.data, model={"variant": model.variant, **model.sizes, **given},
        training={FIELDS.get(name, name): value for name, value in recipe.values.items()
                  if value is not None},
        eval_fraction=data.eval_fraction, out=outputs.out, force=outputs.force,
        progress=not outputs.json_output)
    report_trained(outputs.out, result.metrics, result.summary, outputs.json_output)
