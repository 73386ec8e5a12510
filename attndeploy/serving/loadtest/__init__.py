"""Load test a model served by Triton over gRPC, the way perf_analyzer does, plus correctness.

`run_load_test(LoadTestConfig(...))` returns a `LoadTestReport` (see `loadreport` for its JSON
schema); the CLI only builds the config, calls it and writes the report. For each load level
(a concurrency, closed loop; or a request rate, open loop with constant or Poisson arrivals):

1. warm-up: `warmup_requests` responses that count nowhere (not even in the server's statistics,
   which are read as differences between window boundaries);
2. measurement windows of `window_s` seconds (or `window_requests` responses) until the last
   `stable_windows` agree within `stability_threshold` on throughput and p95 latency, or
   `max_windows` windows (then the level is reported unstable, which is not an error);
3. a sample (`check_fraction`) of responses is compared with in-process onnxruntime on the same
   ONNX file, after the level so that the comparison does not load the client during it.

Every wait is bounded: requests carry a gRPC deadline, each level stops after `max_level_s`, and
consecutive connection errors (or deadlines) trigger a liveness probe that turns a dead server
into a `ServerError` within a few seconds. What cannot work is refused before any load: a
sequence length above the model's `max_seq` (from the ONNX file's metadata or the served
config's `MAX_SEQ` parameter) would only fail every request. When a test stops part-way (the
server died, a level stalled, Ctrl-C), `on_partial` receives what was measured until then, as a
report marked partial, before the error propagates.

Modules: `config` (`LoadTestConfig`, `LoadLevel`, parsing), `inputs` (request pools, vocab and
max_seq from ONNX, reference outputs), `clock` (the time source every wait goes through), `level`
(one load level) and `run` (`run_load_test`).
Every name below is importable from `attndeploy.serving.loadtest` as it was before the split;
patch a name in the submodule that uses it (e.g. `loadtest.run.TritonRunner`), not here.
"""

from __future__ import annotations

from attndeploy.serving.loadtest.clock import REAL_CLOCK, Clock
from attndeploy.serving.loadtest.config import (
    DEFAULT_CONCURRENCY,
    FIRST_TOKEN_ID,
    SEQ_ORDERS,
    LoadLevel,
    LoadTestConfig,
    parse_number_list,
)
from attndeploy.serving.loadtest.inputs import (
    META_MAX_SEQ,
    PARAM_MAX_SEQ,
    check_seq_lengths,
    max_seq_from_onnx,
    served_max_seq,
    vocab_from_onnx,
)
from attndeploy.serving.loadtest.inputs import _build_pool as _build_pool  # tests
from attndeploy.serving.loadtest.level import (
    ABORTED,
    LATE_NS,
    POLL_S,
    PROBE_AFTER_ERRORS,
    PROBE_TIMEOUT_S,
    level_rng,
)
from attndeploy.serving.loadtest.level import _LevelRun as _LevelRun  # tests
from attndeploy.serving.loadtest.report import LevelResult, LoadTestReport
from attndeploy.serving.loadtest.run import DEFAULT_VOCAB, run_load_test

__all__ = [
    "ABORTED",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_VOCAB",
    "FIRST_TOKEN_ID",
    "LATE_NS",
    "META_MAX_SEQ",
    "PARAM_MAX_SEQ",
    "POLL_S",
    "PROBE_AFTER_ERRORS",
    "PROBE_TIMEOUT_S",
    "REAL_CLOCK",
    "SEQ_ORDERS",
    "Clock",
    "LevelResult",
    "LoadLevel",
    "LoadTestConfig",
    "LoadTestReport",
    "check_seq_lengths",
    "level_rng",
    "max_seq_from_onnx",
    "parse_number_list",
    "run_load_test",
    "served_max_seq",
    "vocab_from_onnx",
]
