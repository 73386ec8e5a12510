"""`QuickstartOptions`: what `attndeploy quickstart` runs, with the defaults its CLI shows.

Kept apart from the pipeline (which imports torch) so that the CLI reads these defaults without
importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY


@dataclass(frozen=True)
class QuickstartOptions:
    workdir: Path = Path("quickstart")
    repo: Path = DEFAULT_REPOSITORY
    variants: tuple[str, ...] | None = None  # None: every registered variant, in order
    task: str = "sparse_evidence"
    steps: int = 300
    max_train_seconds: float = 60.0
    seed: int = 0
    concurrency: tuple[int, ...] = (1, 4, 16)
    load_window_s: float = 1.0
    load_max_windows: int = 4
    host: str = "127.0.0.1"
    ports: tuple[int, int, int] | None = None  # (grpc, http, metrics); None = free ports
    serve: bool = True
