"""`attndeploy tune` of a generate model (`<name>_generate`): the largest running batch
(MAX_RUNNING) and onnxruntime's threads (ORT_THREADS), measured on the real local server.

Each candidate is a scratch copy of the model's folder (files hard-linked where possible, the
config rewritten with the candidate's parameters), served alone by a fresh tritonserver and
driven by the generate load tester (`loadtest.generation`) at each concurrency level. The
chosen candidate has the highest output tokens/s at some level whose inter-token p95 keeps
within `itl_budget_ms` (none: the highest tokens/s). Instances are not searched: the model's
one batcher thread is what batches sequences, and a second instance would split the running
batch in two (`packaging/generate_model.py`).

`apply_generate(repo, model, candidate)` writes the chosen parameters into the repository's
config (replaced atomically, the old one kept as `config.pbtxt.previous`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.errors import ConfigError, RepositoryError
from attndeploy.fsutil import atomic_write_text
from attndeploy.serving.loadtest.generation import (
    DEFAULT_PROMPTS,
    GenerateLevel,
    GenerateLoadConfig,
    run_generate_load_test,
)
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.generate_model import (
    PARAM_MAX_RUNNING,
    PARAM_MAX_TOKENS,
    is_generate_config,
)

PREVIOUS_SUFFIX = ".previous"


@dataclass(frozen=True)
class GenerateCandidate:
    """One configuration: the largest running batch, onnxruntime threads, and model instances
    (each its own batcher and session; Triton spreads the requests over them)."""

    max_running: int
    threads: int
    instances: int = 1

    def to_dict(self) -> dict[str, int]:
        return {"max_running": self.max_running, "threads": self.threads,
                "instances": self.instances}


@dataclass
class GenerateMeasurement:
    candidate: GenerateCandidate
    levels: list[GenerateLevel]

    @property
    def ok(self) -> bool:
        return bool(self.levels) and all(level.errors == 0 for level in self.levels)

    def best_tokens_per_s(self, itl_budget_ms: float | None) -> float | None:
        """The highest tokens/s of a level within the budget (None: no level is)."""
        fits = [lv.tokens_per_s for lv in self.levels
                if itl_budget_ms is None or (lv.itl_ms["p95"] is not None
                                             and lv.itl_ms["p95"] <= itl_budget_ms)]
        return max(fits) if fits and self.ok else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.candidate.to_dict(), "levels": [lv.to_dict() for lv in self.levels]}


@dataclass
class GenerateTuneResult:
    model: str
    itl_budget_ms: float | None
    measurements: list[GenerateMeasurement] = field(default_factory=list)

    @property
    def chosen(self) -> GenerateCandidate | None:
        scored = [(m.best_tokens_per_s(self.itl_budget_ms), m) for m in self.measurements]
        scored = [(score, m) for score, m in scored if score is not None]
        return max(scored, key=lambda pair: pair[0])[1].candidate if scored else None

    def to_dict(self) -> dict[str, Any]:
        chosen = self.chosen
        return {"kind": "generate", "model": self.model, "itl_budget_ms": self.itl_budget_ms,
                "chosen": chosen.to_dict() if chosen else None,
                "measurements": [m.to_dict() for m in self.measurements]}


def generate_candidates(max_running: Sequence[int] = (1, 2, 4, 8, 16),
                        threads: Sequence[int] = (1, 2),
                        instances: Sequence[int] = (1,)) -> list[GenerateCandidate]:
    return [GenerateCandidate(b, t, n) for n in instances for t in threads for b in max_running]


def _config_path(repo: Path, model: str) -> Path:
    path = Path(repo) / model / cfgmod.CONFIG_FILE
    if not path.is_file():
        raise RepositoryError(f"{path} is missing: no generate model {model!r} in {repo}")
    return path


def _with_candidate(text: str, source: str, candidate: GenerateCandidate) -> str:
    cfg = cfgmod.parse_config(text, source)
    if not is_generate_config(cfg):
        raise ConfigError(f"{source} is not a generate model's config")
    cfg.parameters[PARAM_MAX_RUNNING].string_value = str(candidate.max_running)
    cfg.parameters[cfgmod.PARAM_ORT_THREADS].string_value = str(candidate.threads)
    if not cfg.instance_group:
        cfg.instance_group.add()
    cfg.instance_group[0].count = candidate.instances
    return cfgmod.serialize_config(cfg)


def _link_or_copy(source: str, target: str) -> str:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def _scratch(repo: Path, model: str, candidate: GenerateCandidate, folder: Path) -> Path:
    """A repository holding only `model`, its config set to `candidate`."""
    config = _config_path(repo, model)
    target = folder / "repo" / model
    shutil.copytree(Path(repo) / model, target, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns(cfgmod.CONFIG_FILE, ".*"))
    (target / cfgmod.CONFIG_FILE).write_text(
        _with_candidate(config.read_text(encoding="utf-8"), str(config), candidate),
        encoding="utf-8")
    return folder / "repo"


def tune_generate(repo: Path, model: str, candidates: Sequence[GenerateCandidate], *,
                  concurrency: Sequence[int] = (8,), requests: int = 16,
                  max_tokens: tuple[int, int] = (32, 32),
                  prompts: Sequence[str] = DEFAULT_PROMPTS, protocol: str = "grpc",
                  itl_budget_ms: float | None = None,
                  progress: Callable[[GenerateMeasurement], None] | None = None,
                  ) -> GenerateTuneResult:
    """Measure every candidate (see the module docstring)."""
    from attndeploy.serving.server import TritonServer, free_ports

    config = _config_path(repo, model)
    cfg = cfgmod.parse_config(config.read_text(encoding="utf-8"), str(config))
    if PARAM_MAX_TOKENS in cfg.parameters:  # never more than the model serves (a translation
        most = int(cfg.parameters[PARAM_MAX_TOKENS].string_value)  # writes max_target tokens)
        max_tokens = (min(max_tokens[0], most), min(max_tokens[1], most))
    result = GenerateTuneResult(model, itl_budget_ms)
    for candidate in candidates:
        with tempfile.TemporaryDirectory(prefix="attndeploy-tune-generate-") as tmp:
            scratch = _scratch(Path(repo), model, candidate, Path(tmp))
            grpc, http, metrics = free_ports()
            with TritonServer(scratch, grpc_port=grpc, http_port=http, metrics_port=metrics,
                              log_file=Path(tmp) / "server.log") as server:
                url = (f"127.0.0.1:{server.grpc_port}" if protocol == "grpc"
                       else f"127.0.0.1:{server.http_port}")
                report = run_generate_load_test(GenerateLoadConfig(
                    model=model, url=url, protocol=protocol, concurrency=tuple(concurrency),
                    requests_per_level=requests, prompts=tuple(prompts),
                    max_tokens=max_tokens, check_fraction=0.0))
        measurement = GenerateMeasurement(candidate, report.levels)
        result.measurements.append(measurement)
        if progress is not None:
            progress(measurement)
    return result


def apply_generate(repo: Path, model: str, candidate: GenerateCandidate) -> Path:
    """Write `candidate` into the repository's config; the old one becomes `.previous`."""
    config = _config_path(repo, model)
    text = config.read_text(encoding="utf-8")
    updated = _with_candidate(text, str(config), candidate)
    atomic_write_text(config.with_name(config.name + PREVIOUS_SUFFIX), text)
    atomic_write_text(config, updated)
    return config
