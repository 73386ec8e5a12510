"""What a tuning run is asked: `TuneOptions`, validated on construction (ConfigError), and the
time estimates that keep it inside its budget."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from attndeploy.errors import ConfigError, LoadTestError
from attndeploy.serving.client.protocol import Protocol
from attndeploy.serving.loadtest.config import LoadTestConfig
from attndeploy.serving.tune.measure import MeasureSettings
from attndeploy.serving.tune.space import SearchSpace

WARMUP_REQUEST_S = 0.05  # a priori time of one warm-up request (tiny models: ~2 ms)


@dataclass(frozen=True)
class TuneOptions:
    """A tuning run of `model` in `repo`.

    - `latency_budget_ms`: the p95 a chosen configuration must keep at some concurrency level
      (None: the highest throughput at any latency).
    - `concurrency`: the closed-loop levels each candidate is measured at, lowest first.
    - `budget_minutes`: the wall time of the whole run (search, the finalists' second
      measurements, the repeat of the chosen candidate and the in-process reference); the search
      stops when the next candidate would not leave time for what follows it.
    - `int8`: an int8 ONNX of the same model, offered as the `int8` precision.
    - `space`: the values of each dimension (`SearchSpace`).
    - `seq_lengths`, `text_file`, `protocol`, `window_s`, `stable_windows`, `max_windows`,
      `stability_threshold`, `warmup_requests`, `check_fraction`, `seed`: the load test of each
      level (`LoadTestConfig`); shorter windows than `loadtest`'s 5 s, so that a budget of
      minutes holds many candidates.
    - `min_gain`: a move must raise the objective by more than this share: 10 %, the load
      tester's own stability threshold (on a shared machine two measurements of one
      configuration often differ by that much, and a smaller gain would follow the noise).
    - `min_level_gain`: a concurrency sweep stops at a level that adds less throughput.
    - `finalists`: how many of the search's best candidates are measured again after it; the
      choice is made on these fresh measurements, not on the search's, since the best of many
      noisy measurements is biased upward (the winner's curse).
    - `repeat_tolerance`: the chosen candidate's repeat must land within this share of the
      measurement it was chosen on to be called stable.
    - `in_process_seconds`: timed seconds of the in-process reference per batch size.
    - `server_start_s`: the a priori time of a server's start and stop (replaced by what the
      first candidates took once measured).
    - `workdir`: where scratch repositories go (default: a temp folder, removed after).
    """

    repo: Path
    model: str
    latency_budget_ms: float | None = None
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    budget_minutes: float = 10.0
    int8: Path | None = None
    space: SearchSpace = field(default_factory=SearchSpace)
    seq_lengths: tuple[int, ...] = (32,)
    text_file: Path | None = None
    protocol: str = Protocol.GRPC.value
    window_s: float = 2.0
    stable_windows: int = 2
    max_windows: int = 4
    stability_threshold: float = 0.10
    warmup_requests: int = 20
    check_fraction: float = 0.01
    min_gain: float = 0.10
    min_level_gain: float = 0.05
    finalists: int = 2
    repeat_tolerance: float = 0.10
    in_process_seconds: float = 2.0
    server_start_s: float = 8.0
    ready_timeout_s: float = 120.0
    seed: int = 0
    workdir: Path | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("repo", Path(self.repo))
        for name in ("int8", "text_file", "workdir"):
            if getattr(self, name) is not None:
                put(name, Path(getattr(self, name)))
        put("concurrency", tuple(self.concurrency))
        put("seq_lengths", tuple(self.seq_lengths))
        protocol = self.protocol.value if isinstance(self.protocol, Protocol) else self.protocol
        put("protocol", protocol)
        problems = self._problems()
        if problems:
            raise ConfigError("invalid tuning options: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        out = []
        if not self.model:
            out.append("model is empty; name the model to tune")
        if self.latency_budget_ms is not None and not self.latency_budget_ms > 0:
            out.append(f"latency_budget_ms must be > 0, got {self.latency_budget_ms}")
        if not self.concurrency or any(
                isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in self.concurrency):
            out.append(f"concurrency levels must be integers >= 1, got {self.concurrency}")
        elif list(self.concurrency) != sorted(set(self.concurrency)):
            out.append(f"concurrency levels must rise, each once, got {self.concurrency}")
        if not self.budget_minutes > 0:
            out.append(f"budget_minutes must be > 0, got {self.budget_minutes}")
        if self.protocol not in {p.value for p in Protocol}:
            out.append(f"protocol must be grpc or http, got {self.protocol!r}")
        for name in ("window_s", "in_process_seconds", "ready_timeout_s"):
            if not getattr(self, name) > 0:
                out.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("min_gain", "min_level_gain", "server_start_s"):
            if getattr(self, name) < 0:
                out.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if isinstance(self.finalists, bool) or not isinstance(self.finalists, int) \
                or self.finalists < 1:
            out.append(f"finalists must be an integer >= 1, got {self.finalists!r}")
        if not 0 < self.repeat_tolerance < 1:
            out.append(f"repeat_tolerance must lie in (0, 1), got {self.repeat_tolerance}")
        if not isinstance(self.space, SearchSpace):
            out.append("space must be a SearchSpace")
        if not out:  # the load test of one level: its own rules
            try:
                LoadTestConfig(
                    model=self.model, protocol=self.protocol, concurrency=self.concurrency,
                    seq_lengths=self.seq_lengths, text_file=self.text_file,
                    window_s=self.window_s, stable_windows=self.stable_windows,
                    max_windows=self.max_windows, stability_threshold=self.stability_threshold,
                    warmup_requests=self.warmup_requests, check_fraction=self.check_fraction)
            except LoadTestError as exc:
                out.append(str(exc).removeprefix("Invalid load test configuration: ")
                           .rstrip("."))
        return out

    @property
    def budget_s(self) -> float:
        return self.budget_minutes * 60.0

    def settings(self) -> MeasureSettings:
        """How each candidate is measured (the load test of each level)."""
        return MeasureSettings(**{f.name: getattr(self, f.name) for f in fields(MeasureSettings)})

    def level_estimate_s(self, *, worst: bool) -> float:
        """A priori seconds of one level: warm-up plus its windows (`worst`: all of them)."""
        windows = self.max_windows if worst else self.stable_windows
        return self.warmup_requests * WARMUP_REQUEST_S + windows * self.window_s

    def candidate_estimate_s(self, *, worst: bool = True) -> float:
        """A priori seconds of one candidate at every level, server start and stop included."""
        return self.server_start_s + len(self.concurrency) * self.level_estimate_s(worst=worst)

    def in_process_estimate_s(self) -> float:
        """The in-process reference: at most one batch size per level, plus session loads."""
        return len(self.concurrency) * (self.in_process_seconds + 1.0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, SearchSpace):
                value = value.to_dict()
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[item.name] = value
        return out
