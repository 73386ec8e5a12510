"""Load test a generate model (`<name>_generate`) the way LLM servers are measured: time to
first token (TTFT), inter-token latency (ITL: the gap between consecutive streamed pieces),
output tokens/s and requests/s, per concurrency level (closed loop: N streams, each sending
its next request when the last ended) and per request rate (open loop: constant or Poisson
arrivals, each request in its own stream).

Each level sends `requests_per_level` requests, streamed (gRPC `async_stream_infer` or HTTP
`/generate_stream`, `client.generate`). Prompts come from `prompts` (a text file's lines)
taken in turn; `max_tokens` is drawn uniformly from `max_tokens` (low, high), seeded. The
requests are greedy, so after each level a `check_fraction` sample is compared with in-process
`generate` on the model's ONNX file (`onnx_path`): the token ids and the text must be equal. A
translation model's `onnx_path` is a folder with its two graphs (an export, or the served
model's version folder): the oracle is the in-process greedy translation of each source alone
(`OnnxSeq2Seq.translate`).

`run_generate_load_test(config) -> GenerateLoadReport` (`to_dict` is the JSON; `write_plot`
the PNG: TTFT and ITL percentiles, and tokens/s, against the level).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import AttnDeployError, LoadTestError
from attndeploy.fsutil import atomic_write_png, atomic_write_text

DEFAULT_PROMPTS = ("the cat", "a dog ran to the", "my friend sees the river", "the house")
PERCENTILES = (50, 95, 99)


@dataclass
class GenerateLoadConfig:
    model: str
    url: str
    protocol: str = "grpc"
    concurrency: tuple[int, ...] = (1, 4, 8)
    request_rates: tuple[float, ...] = ()
    distribution: str = "poisson"  # arrivals in request-rate mode: "poisson" or "constant"
    requests_per_level: int = 32
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    max_tokens: tuple[int, int] = (16, 16)
    check_fraction: float = 0.25
    onnx_path: Path | None = None
    seed: int = 0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.concurrency and not self.request_rates:
            raise LoadTestError("give at least one concurrency or request rate")
        if self.requests_per_level < 1:
            raise LoadTestError("requests per level must be at least 1")
        low, high = self.max_tokens
        if not 1 <= low <= high:
            raise LoadTestError(f"max tokens must be 1 <= low <= high, got {low}-{high}")
        if not self.prompts:
            raise LoadTestError("no prompts to send")
        if self.distribution not in ("poisson", "constant"):
            raise LoadTestError(f"unknown arrival distribution {self.distribution!r}")


def percentiles(values: list[float]) -> dict[str, float | None]:
    """{"p50": ms, ...} of seconds `values` (None when there are none)."""
    if not values:
        return {f"p{p}": None for p in PERCENTILES}
    array = np.asarray(values) * 1000.0
    return {f"p{p}": float(np.percentile(array, p)) for p in PERCENTILES}


@dataclass
class GenerateLevel:
    """One level's measurements (latencies in ms)."""

    mode: str  # "concurrency" or "request_rate"
    value: float
    requests: int
    errors: int
    wall_s: float
    tokens: int
    ttft_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    checked: int = 0
    mismatched: int = 0
    error_messages: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return (self.requests - self.errors) / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "value": self.value, "requests": self.requests,
                "errors": self.errors, "wall_s": round(self.wall_s, 4), "tokens": self.tokens,
                "tokens_per_s": round(self.tokens_per_s, 2),
                "requests_per_s": round(self.requests_per_s, 3),
                "ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms,
                "checks": {"checked": self.checked, "mismatched": self.mismatched},
                "error_messages": self.error_messages[:5]}


@dataclass
class GenerateLoadReport:
    config: GenerateLoadConfig
    levels: list[GenerateLevel]

    @property
    def passed(self) -> bool:
        return all(level.errors == 0 and level.mismatched == 0 for level in self.levels)

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {"kind": "generate", "model": c.model, "url": c.url, "protocol": c.protocol,
                "requests_per_level": c.requests_per_level, "max_tokens": list(c.max_tokens),
                "prompts": len(c.prompts), "check_fraction": c.check_fraction,
                "passed": self.passed, "levels": [level.to_dict() for level in self.levels]}

    def write_json(self, path: Path) -> None:
        atomic_write_text(Path(path), json.dumps(self.to_dict(), indent=2) + "\n")

    def write_plot(self, path: Path) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        figure = Figure(figsize=(10, 4))
        FigureCanvasAgg(figure)
        latency, throughput = figure.subplots(1, 2)
        labels = [f"{'c' if lv.mode == 'concurrency' else 'r'}={lv.value:g}"
                  for lv in self.levels]
        x = np.arange(len(self.levels))
        for key, marker in (("ttft_ms", "o"), ("itl_ms", "s")):
            for p, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
                values = [getattr(lv, key)[p] or np.nan for lv in self.levels]
                latency.plot(x, values, style, marker=marker, label=f"{key[:-3].upper()} {p}")
        latency.set_xticks(x, labels)
        latency.set_ylabel("ms")
        latency.set_title("time to first token, inter-token latency")
        latency.legend(fontsize=7)
        throughput.bar(x, [lv.tokens_per_s for lv in self.levels])
        throughput.set_xticks(x, labels)
        throughput.set_ylabel("output tokens/s")
        throughput.set_title(f"{self.config.model}")
        figure.tight_layout()
        atomic_write_png(figure, Path(path), dpi=100)

    def raise_if_failed(self) -> None:
        if not self.passed:
            bad = [lv for lv in self.levels if lv.errors or lv.mismatched]
            raise LoadTestError(
                "generate load test failed: " + "; ".join(
                    f"{lv.mode} {lv.value:g}: {lv.errors} errors, {lv.mismatched} of "
                    f"{lv.checked} checked differ from in-process generate" for lv in bad))


Send = Callable[[str, int], Any]  # (prompt, max_tokens) -> client.generate.GenerateResult


def _sender(config: GenerateLoadConfig) -> Send:
    from attndeploy.serving.client.generate import GenerateParams, generate

    def send(prompt: str, max_tokens: int) -> Any:
        return generate(config.url, config.model, prompt, GenerateParams(max_tokens=max_tokens),
                        protocol=config.protocol, stream=True, timeout_s=config.timeout_s)

    return send


def _jobs(config: GenerateLoadConfig, level_index: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng([config.seed, level_index])
    low, high = config.max_tokens
    return [(config.prompts[i % len(config.prompts)], int(rng.integers(low, high + 1)))
            for i in range(config.requests_per_level)]


def _measure(mode: str, value: float, jobs: list[tuple[str, int]], send: Send, workers: int,
             gaps: list[float] | None) -> tuple[GenerateLevel, list[tuple[str, int, Any]]]:
    """Send `jobs` with `workers` threads (open loop: each after its gap); the level."""
    results: list[tuple[str, int, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(job: tuple[str, int]) -> None:
        try:
            result = send(*job)
        except AttnDeployError as exc:
            with lock:
                errors.append(str(exc))
            return
        with lock:
            results.append((job[0], job[1], result))

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        if gaps is None:
            list(pool.map(one, jobs))
        else:
            due = started
            futures = []
            for job, gap in zip(jobs, gaps, strict=True):
                due += gap
                time.sleep(max(due - time.perf_counter(), 0.0))
                futures.append(pool.submit(one, job))
            for future in futures:
                future.result()
    wall = time.perf_counter() - started
    ttft = [r.ttft_s for _, _, r in results if r.ttft_s is not None]
    itl = [gap for _, _, r in results for gap in r.inter_token_s]
    level = GenerateLevel(mode, value, len(jobs), len(errors), wall,
                          sum(len(r.token_ids) for _, _, r in results),
                          percentiles(ttft), percentiles(itl), error_messages=errors)
    return level, results


def _check(level: GenerateLevel, results: list[tuple[str, int, Any]], oracle: Any,
           fraction: float, rng: np.random.Generator) -> None:
    if oracle is None or fraction <= 0 or not results:
        return
    count = max(1, int(round(len(results) * fraction)))
    for index in rng.choice(len(results), size=min(count, len(results)), replace=False):
        prompt, max_tokens, result = results[int(index)]
        text, ids = oracle(prompt, max_tokens)
        level.checked += 1
        level.mismatched += int(result.token_ids != ids or result.text != text)


def in_process_oracle(onnx_path: Path) -> Callable[[str, int], tuple[str, list[int]]]:
    """(prompt, max_tokens) -> (text, token ids) of greedy in-process generation: a decoder's
    `generate`, or a translation folder's `translate` (one source at a time, as served)."""
    from attndeploy.generation.seq2seq_onnx import OnnxSeq2Seq, is_translation_export

    if is_translation_export(Path(onnx_path)):
        translator = OnnxSeq2Seq(onnx_path, threads=1)

        def translate(prompt: str, max_tokens: int) -> tuple[str, list[int]]:
            [(text, found)] = translator.translate([prompt], max_new_tokens=max_tokens)
            return text, found.ids

        return translate
    from attndeploy.generation.loop import DecoderModel

    decoder = DecoderModel(onnx_path, threads=1)

    def generate(prompt: str, max_tokens: int) -> tuple[str, list[int]]:
        [result] = decoder.generate(prompt, max_tokens)
        return result.text, result.token_ids

    return generate


def served_max_tokens(config: GenerateLoadConfig) -> int | None:
    """The most new tokens the served model gives one request (its configuration's MAX_TOKENS
    parameter: the model's context less one, or `package --max-new-tokens`), or None where it
    does not say. A server that is down or lacks the model is the client's one-line error."""
    from attndeploy.serving.client.triton import TritonRunner
    from attndeploy.serving.packaging.generate_model import PARAM_MAX_TOKENS

    with TritonRunner(config.url, config.model, protocol=config.protocol,
                      timeout_s=config.timeout_s) as runner:
        parameters = runner.model_config().get("parameters", {})
    value = str(parameters.get(PARAM_MAX_TOKENS, {}).get("string_value", ""))
    return int(value) if value.isdigit() else None


def _check_max_tokens(config: GenerateLoadConfig, most: int | None) -> None:
    """Refuse, before any request, a --max-tokens range the model would refuse request by
    request (every level would only count errors)."""
    low, high = config.max_tokens
    if most is not None and high > most:
        raise LoadTestError(
            f"--max-tokens {low}-{high} asks for more than {config.model} serves: at most "
            f"{most} new tokens a request (its MAX_TOKENS: the model's context less one, or "
            f"package --max-new-tokens); give --max-tokens {min(low, most)}-{most} or less")


def run_generate_load_test(config: GenerateLoadConfig, *, send: Send | None = None,
                           progress: Callable[[GenerateLevel], None] | None = None
                           ) -> GenerateLoadReport:
    """Every level of `config` in turn (concurrencies, then request rates)."""
    if send is None:  # a real server: ask no more new tokens than the model serves
        _check_max_tokens(config, served_max_tokens(config))
    send = send or _sender(config)
    oracle = None
    if config.onnx_path is not None and config.check_fraction > 0:
        oracle = in_process_oracle(config.onnx_path)
    rng = np.random.default_rng(config.seed)
    send(config.prompts[0], 1)  # warm-up: the first request pays for connections
    levels = []
    plan = [("concurrency", float(c)) for c in config.concurrency] + [
        ("request_rate", float(r)) for r in config.request_rates]
    for index, (mode, value) in enumerate(plan):
        jobs = _jobs(config, index)
        if mode == "concurrency":
            level, results = _measure(mode, value, jobs, send, int(value), None)
        else:
            gaps = (rng.exponential(1.0 / value, len(jobs)) if config.distribution == "poisson"
                    else np.full(len(jobs), 1.0 / value))
            level, results = _measure(mode, value, jobs, send, min(len(jobs), 64),
                                      [float(g) for g in gaps])
        _check(level, results, oracle, config.check_fraction, rng)
        levels.append(level)
        if progress is not None:
            progress(level)
    return GenerateLoadReport(config, levels)
