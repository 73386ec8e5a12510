"""Run models in the onnxruntime of the interpreter that runs this file: in-process for the
current onnxruntime, as a script for the one Triton bundles (`.venv/ort-triton`, `make venv`).

It needs numpy and onnxruntime only (no attndeploy), so the same code runs in both environments.
For each model it runs every feed in a plain session (all graph optimizations, CPU provider),
then, per level in `SAVED_LEVELS`, has onnxruntime save its optimized graph
(`SessionOptions.optimized_model_filepath`, what Triton's onnxruntime backend can cache),
loads the saved file in a new session and runs the feeds again.

    python ort_runner.py FEEDS.npz OUT_DIR MODEL.onnx [MODEL.onnx ...]

FEEDS.npz holds `<feed>/<input>` arrays (feed = 0, 1, ...). OUT_DIR receives `<n>.npz` per model
(`<run>/<feed>/<output>`, run = "plain" or "saved-<level>") and `result.json`:
{"onnxruntime": version, "models": [{"path", "outputs": "<n>.npz"} or {"path", "error"}]}.
A model onnxruntime refuses (e.g. an opset newer than it knows) gets an "error", not a crash.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

LEVELS = {
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
SAVED_LEVELS = tuple(LEVELS)


def read_feeds(path: Path) -> list[dict[str, np.ndarray]]:
    arrays = np.load(path)
    feeds: dict[int, dict[str, np.ndarray]] = {}
    for key in arrays.files:
        index, name = key.split("/", 1)
        feeds.setdefault(int(index), {})[name] = arrays[key]
    return [feeds[i] for i in sorted(feeds)]


def write_feeds(path: Path, feeds: list[dict[str, np.ndarray]]) -> None:
    np.savez(path, **{f"{i}/{name}": value for i, feed in enumerate(feeds)
                      for name, value in feed.items()})


def _options(level: str = "all", saved_to: Path | None = None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # fp16 constant-folding notes, "hardware specific" notes
    options.graph_optimization_level = LEVELS[level]
    if saved_to is not None:
        options.optimized_model_filepath = str(saved_to)
    return options


def run_session(session: ort.InferenceSession, feeds: list[dict[str, np.ndarray]],
                run: str) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return {f"{run}/{i}/{name}": value for i, feed in enumerate(feeds)
            for name, value in zip(names, session.run(names, feed), strict=True)}


def run_model(path: Path, feeds: list[dict[str, np.ndarray]], workdir: Path,
              levels: tuple[str, ...] = SAVED_LEVELS) -> dict[str, np.ndarray]:
    """Every run of one model (module docstring). Raises onnxruntime's error if it refuses."""
    providers = ["CPUExecutionProvider"]
    workdir.mkdir(parents=True, exist_ok=True)
    outputs = run_session(ort.InferenceSession(str(path), _options(), providers=providers),
                          feeds, "plain")
    for level in levels:
        saved = workdir / f"{path.stem}.{level}.onnx"
        ort.InferenceSession(str(path), _options(level, saved), providers=providers)
        reloaded = ort.InferenceSession(str(saved), _options(), providers=providers)
        outputs.update(run_session(reloaded, feeds, f"saved-{level}"))
    return outputs


def read_outputs(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as arrays:
        return {key: arrays[key] for key in arrays.files}


def main(argv: list[str]) -> int:
    feeds_path, out_dir, *models = argv
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    feeds = read_feeds(Path(feeds_path))
    results = []
    for n, model in enumerate(models):
        try:
            outputs = run_model(Path(model), feeds, out)
        except Exception as exc:  # onnxruntime's own error types; the message is the result
            results.append({"path": model, "error": f"{type(exc).__name__}: {exc}"})
            continue
        np.savez(out / f"{n}.npz", **outputs)
        results.append({"path": model, "outputs": f"{n}.npz"})
    (out / "result.json").write_text(
        json.dumps({"onnxruntime": ort.__version__, "models": results}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
