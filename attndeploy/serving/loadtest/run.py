"""The whole test: `run_load_test` runs every level with a progress bar and builds the report."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from attndeploy.errors import AttnDeployError, LoadTestError
from attndeploy.families.image_classification.pixels import META_PREPROCESSING
from attndeploy.serving.client.triton import TritonRunner
from attndeploy.serving.loadtest.clock import REAL_CLOCK, Clock
from attndeploy.serving.loadtest.config import FIRST_TOKEN_ID, LoadLevel, LoadTestConfig
from attndeploy.serving.loadtest.inputs import (
    IMAGE_INPUT,
    PARAM_MAX_SEQ,
    TEXT_INPUT,
    _build_pool,
    _input_dtypes,
    _load_onnx,
    _PoolEntry,
    _Reference,
    _TextReference,
    build_text_pool,
    build_tokenized_pool,
    check_seq_lengths,
    check_texts,
    max_seq_from_onnx,
    random_texts,
    read_text_file,
    scales_per_batch,
    served_max_seq,
    text_source,
    vocab_from_onnx,
)
from attndeploy.serving.loadtest.level import _LevelRun
from attndeploy.serving.loadtest.report import LevelResult, LoadTestReport
from attndeploy.serving.loadtest.stats import WindowStats

DEFAULT_VOCAB = 32
MAX_HTTP_WORKERS = 128  # HTTP request threads in request-rate mode (max_in_flight may be more)


class _Progress:
    """A rich progress bar on stderr, one task per level (silent when disabled)."""

    def __init__(self, enabled: bool, total_windows: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.total = total_windows
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            console=Console(stderr=True), disable=not enabled,
        )
        self.task: Any = None

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def start(self, level: LoadLevel) -> None:
        self.task = self.bar.add_task(level.label, total=self.total, info="warm-up")

    def window(self, stats: WindowStats) -> None:
        p95 = f"{stats.p95_ms:.2f} ms" if stats.p95_ms is not None else "-"
        self.bar.update(self.task, advance=1,
                        info=f"{stats.throughput_rps:.0f} req/s, p95 {p95}")

    def finish(self, result: LevelResult) -> None:
        self.bar.update(self.task, completed=self.total,
                        info=f"{result.throughput_infer_per_s:.0f} infer/s ({result.stop_reason})")


def run_load_test(
    config: LoadTestConfig,
    *,
    progress: bool = True,
    on_partial: Callable[[LoadTestReport], None] | None = None,
    clock: Clock = REAL_CLOCK,
    on_window: Callable[[WindowStats], None] | None = None,
) -> LoadTestReport:
    """Run every load level of `config` against the server; return the report (never exits).

    Raises ServerError when no server answers, the model is missing or the server dies during
    the test; LoadTestError when the model does not have the expected interface, a sequence
    length exceeds its max_seq (both before any load) or a level cannot run. A model that
    answers with errors or wrong outputs is a failed report, not an exception: check
    `report.passed` (or call `report.raise_if_failed()`).

    When an error (or Ctrl-C) ends the test once load has begun, `on_partial` is called with the
    levels measured so far, the interrupted one last, in a report marked partial with the
    reason; then the error propagates. `clock` times and paces every level (the real clock
    unless a test simulates one). `on_window` is called with each window as it closes, after
    the progress bar (a benchmark reads the machine's CPU at the windows' edges so).
    """
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_start_ns = clock.now_ns()
    notes: list[str] = []
    vocab = config.vocab_size
    per_batch = False  # the ONNX file scales int8 activations per batch
    images = False  # the ONNX file is an image export: no ids, no vocabulary
    if config.onnx_path is not None:
        onnx_model = _load_onnx(config.onnx_path)
        per_batch = scales_per_batch(onnx_model)
        images = any(p.key == META_PREPROCESSING for p in onnx_model.metadata_props)
        if config.text_file is None:  # a text file's lines are checked once they are read
            check_seq_lengths(config, max_seq_from_onnx(onnx_model), f"from {config.onnx_path}")
        if vocab is None:
            vocab = vocab_from_onnx(onnx_model)
        del onnx_model
    # The text file is read before any server is asked: a line that cannot be sent fails now.
    texts = read_text_file(config.text_file) if config.text_file is not None else None
    if vocab is None:
        vocab = DEFAULT_VOCAB
        if config.text_file is None and config.image_folder is None and not images:
            notes.append(f"token ids drawn from [{FIRST_TOKEN_ID}, {vocab}) if the model takes "
                         "ids: no vocab_size given")
    results: list[LevelResult] = []

    def report(partial_reason: str | None = None) -> LoadTestReport:
        return LoadTestReport(
            url=config.url,
            model=config.model,
            started_at=started_at,
            duration_s=(clock.now_ns() - t_start_ns) / 1e9,
            config=config.to_dict(),
            levels=list(results),
            notes=notes,
            partial_reason=partial_reason,
        )

    probe_timeout = min(config.request_timeout_s, 5.0)
    workers = max(config.concurrency) if config.concurrency else min(config.max_in_flight,
                                                                     MAX_HTTP_WORKERS)
    with TritonRunner(config.url, config.model, timeout_s=probe_timeout,
                      protocol=config.protocol, workers=workers) as runner:
        served = runner.model_config()
        dtypes = _input_dtypes(runner, config, served)
        if config.text_file is None:
            check_seq_lengths(config, served_max_seq(served),
                              f"the served config's {PARAM_MAX_SEQ} parameter")
        served_outputs = [spec.name for spec in runner.metadata().outputs]
        pool, reference = _pool_and_reference(config, vocab, dtypes, served, served_outputs,
                                              notes, per_batch, texts)
        with _Progress(progress, config.max_windows) as bar:
            for level in config.levels:
                bar.start(level)
                run = _LevelRun(runner.client, config, level, pool,
                                reference if checks_exactly(per_batch, level) else None,
                                _both(bar.window, on_window), clock)
                try:
                    result = run.run()
                except (AttnDeployError, KeyboardInterrupt) as exc:
                    if on_partial is not None:
                        results.append(run.partial_result())
                        reason = str(exc) if isinstance(exc, AttnDeployError) else "interrupted"
                        on_partial(report(reason))
                    raise
                bar.finish(result)
                results.append(result)
                if result.stop_reason == "all_failed":
                    skipped = [lv.label for lv in config.levels[len(results):]]
                    if skipped:
                        notes.append(f"every request failed; skipped {', '.join(skipped)}")
                    break
    return report()


def checks_exactly(per_batch: bool, level: LoadLevel) -> bool:
    """Whether answers at `level` can be compared with in-process onnxruntime exactly: always,
    except for an int8 file that scales activations per batch (`per_batch`, `scales_per_batch`)
    above concurrency 1, where the server batches requests together."""
    return not per_batch or (level.mode == "concurrency" and int(level.value) == 1)


def _both(first: Callable[[WindowStats], None],
          then: Callable[[WindowStats], None] | None) -> Callable[[WindowStats], None]:
    if then is None:
        return first

    def call(stats: WindowStats) -> None:
        first(stats)
        then(stats)

    return call


def _pool_and_reference(
    config: LoadTestConfig,
    vocab: int,
    dtypes: dict[str, Any],
    served: dict[str, Any],
    served_outputs: list[str],
    notes: list[str],
    per_batch: bool,
    texts: list[str] | None = None,
) -> tuple[list[list[_PoolEntry]], Any]:
    """The requests to send and the oracle of their answers (None: not checked). `per_batch`:
    the ONNX file scales int8 activations per batch (`scales_per_batch`); `texts`: the lines of
    `text_file`, read (None: read here, if there is one).

    An id model gets random ids, or `text_file`'s lines tokenized here; a text model (input
    `text`) gets random vocabulary words, or the lines themselves. Either way the oracle is
    in-process onnxruntime on `onnx_path` (for a text model: its id model's file).
    """
    if IMAGE_INPUT in dtypes:
        return _image_pool_and_reference(config, served_outputs, notes)
    if config.image_folder is not None:
        raise LoadTestError(f"--image-folder is for an image model (input {IMAGE_INPUT!r}); "
                            f"'{config.model}' takes {', '.join(dtypes)}")
    takes_text = TEXT_INPUT in dtypes
    source = None
    if config.onnx_path is not None and (takes_text or config.text_file is not None):
        source = text_source(config.onnx_path, served if takes_text else None)
    if texts is None and config.text_file is not None:
        texts = read_text_file(config.text_file)
    if texts is not None:
        if source is None:
            raise LoadTestError(
                f"--text-file needs the model's vocabulary and max_seq: give the repository or "
                f"the ONNX file of '{config.model}'"
                + ("" if config.onnx_path is None else f" ({config.onnx_path} has no tokenizer)")
            )
        encoded = check_texts(texts, source, config.text_file)
        lengths = [len(e.ids) for e in encoded]
        notes.append(f"texts: the {len(texts)} non-blank lines of {config.text_file}, "
                     f"{config.batch} per request ({min(lengths)}-{max(lengths)} tokens, mean "
                     f"{sum(lengths) / len(lengths):.1f}); the seq lengths were not used")
        pool = (build_text_pool(config, [texts]) if takes_text
                else build_tokenized_pool(config, encoded, dtypes))
    elif takes_text:
        if source is None:
            notes.append("no vocabulary (no ONNX file of the id model): texts of unknown words")
        pool = build_text_pool(config, random_texts(config, source))
    else:
        pool = _build_pool(config, vocab, dtypes)
    reference: Any = None
    if config.onnx_path is not None and config.check_fraction > 0:
        if takes_text:
            reference = _TextReference(config.onnx_path, source, served_outputs) \
                if source is not None else None
        else:
            reference = _Reference(config.onnx_path, served_outputs)
        if reference is None or not reference.outputs:
            notes.append("no output of the ONNX file is served: correctness not checked")
            reference = None
        elif per_batch:
            alone = any(checks_exactly(per_batch, level) for level in config.levels)
            notes.append(f"{config.onnx_path} is int8 by dynamic quantization with activations "
                         "scaled per batch, so an answer computed in a batch differs from the "
                         "request run alone; answers are checked at concurrency 1 only, where "
                         "each request runs alone" + ("" if alone else
                                                      " (no such level here: none checked)"))
    elif config.check_fraction > 0:
        notes.append("no onnx_path given: responses were not checked against onnxruntime")
    return pool, reference


def _image_pool_and_reference(config: LoadTestConfig, served_outputs: list[str],
                              notes: list[str]) -> tuple[list[list[_PoolEntry]], Any]:
    """An image model's requests (the folder's images, or random pixels) and their oracle
    (`loadtest.images`); the model's ONNX file is needed for its size, labels and answers."""
    from attndeploy.serving.loadtest.images import (
        ImageReference,
        build_image_pool,
        check_images,
        image_source,
        random_images,
        read_image_folder,
    )

    if config.text_file is not None:
        raise LoadTestError(f"'{config.model}' is an image model: send --image-folder DIR, not "
                            "--text-file")
    source = image_source(config.onnx_path) if config.onnx_path is not None else None
    if config.onnx_path is not None and source is None:
        raise LoadTestError(f"{config.onnx_path} is not an image export; give the image "
                            f"model's own ONNX file (in its version folder)")
    if config.image_folder is not None:
        images = read_image_folder(config.image_folder)
        notes.append(f"images: the {len(images)} PNG and JPEG files below "
                     f"{config.image_folder}, {config.batch} per request; the seq lengths "
                     "were not used")
    elif source is None:
        raise LoadTestError(f"'{config.model}' is an image model: give --image-folder DIR, or "
                            "the repository (or --onnx) so random images of its size can be "
                            "made")
    else:
        images = random_images(config, source.preprocessing)
        notes.append(f"images: {len(images)} PNGs of random pixels "
                     f"({'x'.join(map(str, source.preprocessing.shape))}), {config.batch} per "
                     "request")
    if source is not None:
        check_images(images, source)
    reference: Any = None
    if source is not None and config.check_fraction > 0:
        reference = ImageReference(config.onnx_path, source, served_outputs)
        if not reference.outputs:
            notes.append("no output of the family is served: correctness not checked")
            reference = None
    elif config.check_fraction > 0:
        notes.append("no onnx_path given: responses were not checked against onnxruntime")
    return build_image_pool(config, images), reference
