"""The whole test: `run_load_test` runs every level with a progress bar and builds the report."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from attndeploy.errors import AttnDeployError
from attndeploy.serving.client import TritonRunner
from attndeploy.serving.loadreport import LevelResult, LoadTestReport
from attndeploy.serving.loadstats import WindowStats
from attndeploy.serving.loadtest.config import FIRST_TOKEN_ID, LoadLevel, LoadTestConfig
from attndeploy.serving.loadtest.inputs import (
    PARAM_MAX_SEQ,
    _build_pool,
    _input_dtypes,
    _load_onnx,
    _Reference,
    check_seq_lengths,
    max_seq_from_onnx,
    served_max_seq,
    vocab_from_onnx,
)
from attndeploy.serving.loadtest.level import _LevelRun

DEFAULT_VOCAB = 32


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
) -> LoadTestReport:
    """Run every load level of `config` against the server; return the report (never exits).

    Raises ServerError when no server answers, the model is missing or the server dies during
    the test; LoadTestError when the model does not have the expected interface, a sequence
    length exceeds its max_seq (both before any load) or a level cannot run. A model that
    answers with errors or wrong outputs is a failed report, not an exception: check
    `report.passed` (or call `report.raise_if_failed()`).

    When an error (or Ctrl-C) ends the test once load has begun, `on_partial` is called with the
    levels measured so far, the interrupted one last, in a report marked partial with the
    reason; then the error propagates.
    """
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    notes: list[str] = []
    vocab = config.vocab_size
    if config.onnx_path is not None:
        onnx_model = _load_onnx(config.onnx_path)
        check_seq_lengths(config, max_seq_from_onnx(onnx_model), f"from {config.onnx_path}")
        if vocab is None:
            vocab = vocab_from_onnx(onnx_model)
        del onnx_model
    if vocab is None:
        vocab = DEFAULT_VOCAB
        notes.append(f"token ids drawn from [{FIRST_TOKEN_ID}, {vocab}): no vocab_size given")
    results: list[LevelResult] = []

    def report(partial_reason: str | None = None) -> LoadTestReport:
        return LoadTestReport(
            url=config.url,
            model=config.model,
            started_at=started_at,
            duration_s=time.perf_counter() - t_start,
            config=config.to_dict(),
            levels=list(results),
            notes=notes,
            partial_reason=partial_reason,
        )

    probe_timeout = min(config.request_timeout_s, 5.0)
    with TritonRunner(config.url, config.model, timeout_s=probe_timeout) as runner:
        served = runner.model_config()
        dtypes = _input_dtypes(runner, config, served)
        check_seq_lengths(config, served_max_seq(served),
                          f"the served config's {PARAM_MAX_SEQ} parameter")
        reference = None
        if config.onnx_path is not None and config.check_fraction > 0:
            served_outputs = [spec.name for spec in runner.metadata().outputs]
            reference = _Reference(config.onnx_path, served_outputs)
            if not reference.outputs:
                notes.append("no output of the ONNX file is served: correctness not checked")
                reference = None
        elif config.check_fraction > 0:
            notes.append("no onnx_path given: responses were not checked against onnxruntime")
        pool = _build_pool(config, vocab, dtypes)
        with _Progress(progress, config.max_windows) as bar:
            for level in config.levels:
                bar.start(level)
                run = _LevelRun(runner.client, config, level, pool, reference, bar.window)
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
