"""The interop matrix: which exports run where, and the runs of each, made once per session.

Rows: one float32 and one float16 case per registered variant (every `attndeploy` op among
them, the BiLSTM family too) and one export with the functions inlined; each at opsets 18 (the
exporter's default) and the highest that both the exporter (23: SDPA becomes one `Attention`
node) and Triton's onnxruntime run (25 for 26.05's); test_matrix.py checks that Triton's
onnxruntime refuses a model of one op above its highest.

Runtimes, each compared with the current onnxruntime's plain run (`Artifacts.current`):
- `triton`: onnxruntime as the release `deploy kubernetes` pins bundles it (1.24.4 in Triton
  26.05), in its own virtualenv (`make venv` builds `.venv/ort-triton`), run through
  `ort_runner.py` in a subprocess;
- `optimizer`: `onnxruntime.transformers.optimizer.optimize_model(path, "bert", num_heads,
  hidden_size)` (Optimum's ORTOptimizer), the optimized model run in both onnxruntimes;
- `reference`: `onnx.reference.ReferenceEvaluator` on the shipped file (functions not inlined);
- `saved`: onnxruntime's saved optimized graph (basic, extended, all), reloaded, in both.

Tolerances (Polygraphy's rule: an element fails only beyond both atol and rtol·|b|), with the
largest differences measured on this matrix (onnxruntime 1.32 and 1.19.2, CPU; 1.24.4 stays
within the same tolerances):
- a saved optimized graph vs the plain run, same onnxruntime: 6e-8 (1e-6).
- onnxruntime 1.19.2 vs current: fp32 2.4e-7 (1e-6); fp16 2.1e-4 on logits below 1.5: the
  versions run different float16 kernels natively or around Casts, so intermediate roundings to
  float16 differ; allowed: 2^-10, one float16 unit in the last place at magnitude 1.
- transformer optimizer vs plain: 2.4e-7 (fp32 1e-6; fp16 2^-10 as across versions: a fused
  op rounds to float16 once instead of after every op it replaces).
- onnx.reference vs onnxruntime: fp32 1.2e-7, fp16 4.5e-4 (numpy computes float16 in float16):
  the project's defaults (docs/architecture.md: 1e-5/1e-4, 1e-2/1e-2).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from attndeploy.opspec.spec import SUPPORTED_OPSETS
from attndeploy.serving.packaging.triton_releases import TRITON_ORT_MAX_OPSET
from attndeploy.validate.compare import CompareResult, Tolerance, compare_outputs
from attndeploy.validate.grid import Shape, make_inputs, valid_mask
from tests.cases import CASES_BY_ID
from tests.export.conftest import Exported, Exports
from tests.interop import ort_runner

REPO = Path(__file__).resolve().parents[2]
# The onnxruntime Triton 26.05 (server 2.69) bundles; triton_releases.TRITON_RELEASE names 1.24.
TRITON_ORT_VERSION = "1.24.4"
TRITON_ORT_PYTHON = Path(os.environ.get("ATTNDEPLOY_TRITON_ORT_PYTHON",
                                        REPO / ".venv" / "ort-triton" / "bin" / "python"))
RUNNER = Path(ort_runner.__file__)

FP16_ULP_AT_1 = 2.0 ** -10
SAME_RUNTIME = {"float32": Tolerance(1e-6, 1e-6), "float16": Tolerance(1e-6, 1e-6)}
CROSS_VERSION = {"float32": Tolerance(1e-6, 1e-6),
                 "float16": Tolerance(FP16_ULP_AT_1, FP16_ULP_AT_1)}
OPTIMIZER = CROSS_VERSION
REFERENCE = {"float32": Tolerance(1e-5, 1e-4), "float16": Tolerance(1e-2, 1e-2)}

# Two feeds: a padded batch (rows of 9, 1 and a random length) and one unpadded row.
SHAPES = (Shape(3, 9), Shape(1, 6))


@dataclass(frozen=True)
class Row:
    case_id: str
    dtype: str  # "float32" or "float16"
    inline: bool = False

    @property
    def variant(self) -> str:
        return CASES_BY_ID[self.case_id].variant

    @property
    def fp16(self) -> bool:
        return self.dtype == "float16"

    def label(self) -> str:
        return f"{self.case_id}-{'fp16' if self.fp16 else 'fp32'}" + (
            "-inlined" if self.inline else "")


ROWS = (
    Row("standard", "float32"), Row("bilstm_standard", "float16"),
    Row("qvi_pooled", "float32"), Row("qvi_pairwise", "float16"),
    Row("ganet_mlp", "float32"), Row("ganet_bilstm_family", "float16"),
    Row("evolving_leaky", "float32"), Row("evolving", "float16"),
    Row("evolving_leaky", "float32", inline=True),
)
EXPORTER_MAX_OPSET = max(SUPPORTED_OPSETS)
OPSETS = (18, min(EXPORTER_MAX_OPSET, TRITON_ORT_MAX_OPSET))
ENTRIES = tuple((row, opset) for row in ROWS for opset in OPSETS)


def entry_params(runnable_in_triton: bool | None = None) -> list[Any]:
    """pytest params over ENTRIES (id `case-dtype-opN`); filtered by whether Triton's
    onnxruntime can run the opset."""
    return [
        pytest.param(row, opset, id=f"{row.label()}-op{opset}") for row, opset in ENTRIES
        if runnable_in_triton is None or (opset <= TRITON_ORT_MAX_OPSET) == runnable_in_triton
    ]


def triton_python() -> Path:
    """The Triton-onnxruntime interpreter; fails the test (never skips) when it is missing."""
    if not TRITON_ORT_PYTHON.exists():
        pytest.fail(
            f"{TRITON_ORT_PYTHON} is missing: the onnxruntime {TRITON_ORT_VERSION} environment "
            "(Triton's onnxruntime) is built by `make venv`; run `make venv` (or set "
            "ATTNDEPLOY_TRITON_ORT_PYTHON to a Python with onnxruntime=="
            f"{TRITON_ORT_VERSION} and numpy<2)"
        )
    return TRITON_ORT_PYTHON


def compare(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], run: str,
            actual_run: str, tolerance: Tolerance, tagging: bool) -> list[str]:
    """Every feed's outputs of `actual_run` against `run`; the failure messages."""
    failures = []
    for index, shape in enumerate(SHAPES):
        prefix_a, prefix_e = f"{actual_run}/{index}/", f"{run}/{index}/"
        got = {k[len(prefix_a):]: v for k, v in actual.items() if k.startswith(prefix_a)}
        want = {k[len(prefix_e):]: v for k, v in expected.items() if k.startswith(prefix_e)}
        result: CompareResult = compare_outputs(
            got, want, tolerance, valid=valid_mask(feeds()[index]), tagging=tagging
        )
        failures += [f"{actual_run} {shape} {name}: {result.outputs[name].message}"
                     for name in result.failures]
    return failures


def max_abs(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], actual_run: str,
            run: str = "plain") -> float:
    """Largest |a - b| over the float outputs of every feed: how the measurements in the
    module docstring were taken."""
    worst = 0.0
    for key, value in actual.items():
        if key.startswith(actual_run + "/") and value.dtype.kind == "f":
            other = expected[run + key[len(actual_run):]]
            worst = max(worst, float(np.abs(value.astype(np.float64) - other).max()))
    return worst


def run_in_triton(models: list[Path], feeds_path: Path, out: Path) -> tuple[str, list[Any]]:
    """`ort_runner.py` in Triton's onnxruntime: (its version, per model its outputs or
    {"error": message})."""
    done = subprocess.run(
        [str(triton_python()), str(RUNNER), str(feeds_path), str(out), *map(str, models)],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(f"{RUNNER.name} failed in {TRITON_ORT_PYTHON}:\n{done.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    runs = [{"error": model["error"]} if "error" in model
            else ort_runner.read_outputs(out / model["outputs"]) for model in result["models"]]
    return result["onnxruntime"], runs


@functools.cache
def feeds() -> tuple[dict[str, np.ndarray], ...]:
    vocab = CASES_BY_ID["standard"].config().vocab_size
    return tuple(make_inputs(shape, vocab) for shape in SHAPES)


class Artifacts:
    """One entry's export and runs, each made on first use."""

    def __init__(self, exported: Exported, row: Row, opset: int, workdir: Path) -> None:
        self.exported, self.row, self.opset = exported, row, opset
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.tagging = exported.config.head == "tagging"

    @property
    def path(self) -> Path:
        return self.exported.path

    @functools.cached_property
    def feeds_path(self) -> Path:
        path = self.workdir / "feeds.npz"
        ort_runner.write_feeds(path, list(feeds()))
        return path

    @functools.cached_property
    def current(self) -> dict[str, np.ndarray]:
        """The current onnxruntime: plain and saved-graph runs."""
        return ort_runner.run_model(self.path, list(feeds()), self.workdir / "current")

    @functools.cached_property
    def optimized_path(self) -> Path:
        """The transformer optimizer's model, as Optimum's ORTOptimizer makes it."""
        from onnxruntime.transformers.optimizer import optimize_model

        config = self.exported.config
        heads, hidden = (config.n_heads, config.d_model) if config.family == "transformer" \
            else (0, 0)
        optimized = optimize_model(str(self.path), model_type="bert", num_heads=heads,
                                   hidden_size=hidden)
        path = self.workdir / "optimized.onnx"
        onnx.save(optimized.model, str(path))
        return path

    @functools.cached_property
    def optimized_current(self) -> dict[str, np.ndarray]:
        return ort_runner.run_model(self.optimized_path, list(feeds()),
                                    self.workdir / "optimized-current", levels=())

    @functools.cached_property
    def triton(self) -> dict[str, Any]:
        """Triton's onnxruntime on the shipped model and the optimized one:
        {"version", "shipped"/"optimized": outputs or {"error": message}}."""
        models = [self.path] + ([self.optimized_path] if self.opset <= TRITON_ORT_MAX_OPSET
                                else [])
        version, runs = run_in_triton(models, self.feeds_path, self.workdir / "triton")
        return {"version": version, **dict(zip(("shipped", "optimized"), runs, strict=False))}

    @functools.cached_property
    def reference(self) -> dict[str, np.ndarray]:
        """onnx.reference on the file as shipped (model-local functions kept)."""
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(onnx.load(str(self.path)))
        names = list(evaluator.output_names)
        return {f"plain/{i}/{name}": np.asarray(value) for i, feed in enumerate(feeds())
                for name, value in zip(names, evaluator.run(None, feed), strict=True)}


class Matrix:
    """The session's Artifacts, by entry."""

    def __init__(self, exports: Exports, root: Path) -> None:
        self.exports, self.root = exports, root
        self._made: dict[tuple[Row, int], Artifacts] = {}

    def get(self, row: Row, opset: int) -> Artifacts:
        key = (row, opset)
        if key not in self._made:
            exported = self.exports.get(row.case_id, opset=opset, fp16=row.fp16,
                                        inline_functions=row.inline)
            self._made[key] = Artifacts(exported, row, opset,
                                        self.root / f"{row.label()}-op{opset}")
        return self._made[key]
