"""Fine-tune a converted Hugging Face encoder as a text classifier and save an attndeploy
checkpoint (`attndeploy train --hf-model DIR_OR_CONFIG --variant V --data file.jsonl`).

The model comes from a local directory or file, never from the Hub:
- a `save_pretrained` directory with `config.json` and `model.safetensors` (or a sharded
  `model.safetensors.index.json`): the pretrained encoder, with a new classification head;
- a directory with `config.json` only, or a config JSON file: a model built from the config with
  random weights.
Weights in pickle files (`pytorch_model.bin`) are refused: attndeploy never unpickles.
`config.json`'s `model_type` picks the class (`bert`, `roberta`, `distilbert` ->
`*ForSequenceClassification`); the labels of the data set its head.

The tokenizer is the directory's (`tokenizer.json` holding WordPiece, or `vocab.txt`); without
one, a WordPiece vocabulary is trained on the training texts. A model built from a config then
takes the vocabulary's size and `[PAD]` (id 0) as its pad token; a pretrained model keeps its
embedding table, which must hold the vocabulary.

Data: a JSONL file of `{"text", "label"}` (split as `attndeploy train --data` splits it:
`eval_fraction` held out, then `val_fraction` of the rest kept for model selection) or a built-in
classification task (`sparse_evidence`; train, validation and held-out sets from different seeds),
whose word lists are rendered as text. Texts longer than `max_seq` tokens (`[CLS]` and `[SEP]`
included) are refused.

Training is `attndeploy.train`'s loop on a model that is already built (module docstring
there): epochs, selection on the validation set (else the held-out one) with the best weights kept,
`patience`/`max_epochs`/`steps`/`max_seconds` stops, GA-Net's density target and threshold
calibration (on the validation set, else the training texts), the weight average,
and a cosine schedule that ends at the last step the run can take (`max_epochs` epochs or `steps`,
whichever is fewer; on a small set `max_epochs` first grows until the run can take `min_steps`
steps: `training.recipe`). The bag-of-words baseline (on the texts' words) joins the held-out
metrics, and for pretrained weights the linear probe (the frozen encoder, mean-pooled, logistic
regression: `hf_probe`) as `probe_accuracy`.
`embedding_init` does not apply (the encoder keeps its embeddings); word dropout replaces pieces
(never `[CLS]`, `[SEP]`) by `[UNK]`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from attndeploy.data import TextDataset
from attndeploy.errors import CheckpointError, ConfigError
from attndeploy.fsutil import check_replaceable
from attndeploy.integrations.hf_checkpoint import (
    HFClassifier,
    model_config_of,
    save_hf_checkpoint,
)
from attndeploy.integrations.hf_data import (
    HFSource,
    HFTrainingData,
    check_loaded_weights,
    fit_hf_baseline,
    load_hf_training_data,
    load_source,
)
from attndeploy.integrations.hf_probe import fit_hf_probe
from attndeploy.integrations.hf_tokenizer import WordPieceTokenizer
from attndeploy.integrations.transformers import conversion_of, convert, variant_config
from attndeploy.integrations.warm_start import added_parameters, set_warm_start_progress
from attndeploy.models.inputs import position_limit
from attndeploy.train import TrainConfig, TrainResult, fit
from attndeploy.training.baseline import compare_with_baseline
from attndeploy.training.config import defaults_for
from attndeploy.training.density import density_shortfall
from attndeploy.training.recipe import sized_for
from attndeploy.training.schedule import warmup_steps
from attndeploy.variants.registry import variant_spec

# ----------------------------------------------------------------------------- the model


def build_classifier(
    source: HFSource, data: HFTrainingData, variant: str, options: dict[str, Any], *,
    max_seq: int, seed: int = 0,
) -> HFClassifier:
    """The source's encoder with a classification head for the data's labels, converted."""
    import transformers

    config = source.config
    names = data.label_names
    config.num_labels = len(names)
    config.id2label = dict(enumerate(names))
    config.label2id = {name: i for i, name in enumerate(names)}
    if source.weights is None and source.tokenizer is None:
        config.vocab_size = len(data.tokenizer)  # a fresh model takes the trained vocabulary
        config.pad_token_id = data.tokenizer.pad_id
    if len(data.tokenizer) > config.vocab_size:
        raise ConfigError(f"the tokenizer has {len(data.tokenizer)} pieces but the model embeds "
                          f"{config.vocab_size}")
    if max_seq > position_limit(config):
        raise ConfigError(f"--max-seq {max_seq} exceeds the model's {position_limit(config)} "
                          "positions")
    variant_config(variant, options)  # refuse bad options before building anything
    cls = getattr(transformers, source.classifier)
    torch.manual_seed(seed)  # the new head and the variant's parameters
    if source.weights is not None:
        with _transformers_quiet():  # its load report lists the new head; the check below
            model, loading_info = cls.from_pretrained(  # says what matters. A local folder:
                str(source.weights), config=config, local_files_only=True,  # no Hub access;
                use_safetensors=True, ignore_mismatched_sizes=True,  # a new head if the
                output_loading_info=True,  # labels differ
            )
        check_loaded_weights(model, loading_info, source.weights)
    else:
        model = cls(config)
    convert(model, variant, warm_start=source.weights is not None, **options)
    classifier = HFClassifier(model, model_config_of(model, max_seq))
    if source.weights is not None:  # the variant's own parameters train at their own rate;
        # the new head (`missing`) trains with the encoder, as in the usual fine-tuning recipe
        classifier.new_parameters = {f"model.{name}" for name in added_parameters(model)}
    return classifier


@contextmanager
def _transformers_quiet() -> Iterator[None]:
    """transformers' warnings and progress bars off (its load report, "Loading weights"), as
    they were after."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


# ----------------------------------------------------------------------------- training


HFTrainResult = TrainResult  # the fine-tuned HFClassifier, its metrics, summary and history


def _drop_pieces(input_ids: torch.Tensor, attention_mask: torch.Tensor, rate: float, unk: int,
                 keep: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Replace each real piece, the ids in `keep` ([CLS], [SEP]) excepted, by [UNK] with
    probability `rate`."""
    droppable = (attention_mask != 0) & ~torch.isin(input_ids, keep)  # [B, T]
    drop = (torch.rand(input_ids.shape, generator=generator) < rate) & droppable
    return torch.where(drop, torch.full_like(input_ids, unk), input_ids)  # [B, T]


def fine_tune(
    model: HFClassifier, train_set: TextDataset, eval_set: TextDataset, config: TrainConfig, *,
    density_weight: float = 0.0, val_set: TextDataset | None = None,
    tokenizer: WordPieceTokenizer | None = None, progress: bool = True,
    teacher: HFClassifier | None = None,
) -> HFTrainResult:
    """Train `model` in place with `attndeploy train`'s loop (`attndeploy.train.fit`); returns it
    in eval mode with metrics on `eval_set`. Selection reads `val_set` when given, else
    `eval_set`; word dropout needs the `tokenizer` (its [UNK], [CLS] and [SEP]). With
    `density_calibrate` the gate threshold moves at the end as `fit` moves it (on `val_set`, else
    on `train_set`). The selected model is kept: no refit on the validation examples (`refit` is
    set to False)."""
    if not len(train_set):
        raise ConfigError("the training set is empty")
    if config.word_dropout and tokenizer is None:
        raise ConfigError("word dropout needs the tokenizer (its [UNK], [CLS] and [SEP] ids)")
    torch.manual_seed(config.seed)  # the model is built: seed what training draws
    corrupt = None
    if config.word_dropout:
        keep = torch.tensor([tokenizer.cls_id, tokenizer.sep_id])

        def corrupt(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    generator: torch.Generator) -> torch.Tensor:
            return _drop_pieces(input_ids, attention_mask, config.word_dropout,
                                tokenizer.unk_id, keep, generator)

    config = replace(config, refit=False)
    return fit(
        model, train_set, eval_set, config, density_weight=density_weight,
        label=f"fine-tune {model.config.architecture} / {model.config.variant}",
        progress=progress, val_set=val_set, corrupt=corrupt,
        before_step=_warm_start_ramp(model, config),
        new_parameters=getattr(model, "new_parameters", None), teacher=teacher,
    )


def _warm_start_ramp(model: HFClassifier, config: TrainConfig
                     ) -> Callable[[int, int], None] | None:
    """For a warm-started conversion (`convert(warm_start=True)`), the hook that brings the
    variant in over the learning rate's warm-up steps, so that it is whole before the first
    evaluation and while the steps are still small; None otherwise."""
    conversion = conversion_of(model.model)
    if conversion is None or not conversion.warm_start:
        return None

    def ramp(step: int, horizon: int) -> None:
        set_warm_start_progress(model.model, (step + 1) / warmup_steps(config, horizon))

    return ramp


def train_hf_checkpoint(
    hf_model: Path,
    variant: str,
    out_dir: Path,
    *,
    options: dict[str, Any] | None = None,
    task: str | None = None,
    data_file: Path | None = None,
    train_config: TrainConfig | None = None,
    max_seq: int = 128,
    n_train: int = 4000,
    n_eval: int = 1000,
    n_val: int = 0,
    eval_fraction: float = 0.2,
    val_fraction: float = 0.0,
    force: bool = False,
    progress: bool = True,
    split_seed: int | None = None,
    truncate: bool = False,
) -> HFTrainResult:
    """Load, convert, fine-tune, evaluate (with the baseline beside) and save: the library side
    of `attndeploy train --hf-model`. `options` are fields of the variant's config.
    `train_config` None takes the defaults for the data (`training.config.defaults_for`: the
    pretrained recipe when the folder holds weights), and the preset's variant options under
    `options`. The data splits with `split_seed`, by
    default the training seed. `truncate` keeps the first `max_seq` pieces of a longer text
    (without it such a text is refused)."""
    out_dir = Path(out_dir)
    check_replaceable(out_dir, force=force, error=CheckpointError)  # before the training time
    if task is not None and data_file is not None:
        raise ConfigError("give either --dataset or --data, not both")
    options = dict(options or {})
    variant_config(variant, options)  # an unknown variant or option fails before any loading
    source = load_source(Path(hf_model))
    if train_config is None:  # pretrained weights fine-tune with their own recipe
        defaults = defaults_for(real_text=data_file is not None,
                                pretrained=source.weights is not None)
        train_config = defaults.training_for(variant)
        options = {**defaults.options_for(variant), **options}
    sub = variant_config(variant, options)
    # The encoder keeps its own embeddings: embedding_init does not apply.
    train_config = replace(train_config, embedding_init=0.0)
    data = load_hf_training_data(
        source, task=task, data_file=data_file,
        seed=train_config.seed if split_seed is None else split_seed, n_train=n_train,
        n_eval=n_eval, n_val=n_val, eval_fraction=eval_fraction, val_fraction=val_fraction,
        max_seq=max_seq, truncate=truncate,
    )
    model = build_classifier(source, data, variant, options, max_seq=max_seq,
                             seed=train_config.seed)
    train_config = sized_for(train_config, len(data.train_set))  # more epochs on a small set
    if not model.is_gated:
        train_config = replace(train_config, density_target=None)  # no gates to steer
    spec = variant_spec(variant)
    density_weight = spec.density_weight(sub)  # its TrainingHooks, as `train` reads them
    teacher = None
    if train_config.distill:  # a gated variant learns from its dense-gate run (training.distill)
        dense = build_classifier(source, data, variant, asdict(spec.dense_gate(sub)),
                                 max_seq=max_seq, seed=train_config.seed)
        teacher = fine_tune(dense, data.train_set, data.eval_set,
                            replace(train_config, density_target=None, distill=0.0),
                            val_set=data.val_set, tokenizer=data.tokenizer, progress=progress)
    result = fine_tune(model, data.train_set, data.eval_set, train_config,
                       density_weight=density_weight, val_set=data.val_set,
                       tokenizer=data.tokenizer, progress=progress,
                       teacher=None if teacher is None else teacher.model)
    if teacher is not None:
        result.summary["teacher"] = {
            "accuracy": teacher.metrics["accuracy"], "seconds": teacher.summary["seconds"],
            "weight": train_config.distill, "temperature": train_config.distill_temperature}
        result.summary["seconds"] = round(result.summary["seconds"]
                                          + teacher.summary["seconds"], 3)
    result.metrics.update(fit_hf_baseline(data))
    with _transformers_quiet():  # its load report would list the head left out
        result.metrics.update(fit_hf_probe(source, data))  # pretrained weights only
    result.metrics.update(compare_with_baseline(result.metrics))
    shortfall = density_shortfall(result.metrics, result.summary)
    if shortfall is not None:
        result.summary["density_shortfall"] = shortfall
    origin = dict(data.source, hf_model=str(source.path),
                  pretrained=source.weights is not None)
    save_hf_checkpoint(
        result.model, out_dir, label_names=data.label_names, tokenizer=data.tokenizer,
        data=origin, training=result.summary, metrics=result.metrics, force=force,
    )
    return result
