"""Runners: one interface for every backend that can execute a model (Polygraphy's design).

A runner is a context manager with a `name` and `infer(feed) -> outputs`, both dicts of numpy
arrays keyed by tensor name (the model-level interface of docs/ops.md: `input_ids`/`attention_mask`
in, `logits` [+ `gates`] out). The interface, `Runner`, is declared once in `attndeploy.interface`;
`attndeploy.serving.client.triton.TritonRunner` implements it too, so parity checks and load tests
swap backends freely.

- `TorchRunner(model)`: PyTorch eager, the reference. Returns `logits` float32, and for GA-Net
  `gates` bool and `gate_logits` float32 (the auxiliary network's s, for gate margins).
- `OrtRunner(path, optimization="all"|"none")`: onnxruntime with all graph optimizations or none.
- `ReferenceRunner(path)`: `onnx.reference.ReferenceEvaluator`, an independent implementation of
  ONNX in numpy (slow). The model's local functions are inlined first, because onnx 1.23's
  reference `LeakyRelu` (an OpRunUnaryNum) rejects an attribute reference inside a function body.

A runtime that cannot load or run a model raises `RunnerError` (a ValidationError) carrying the
runtime's own message and `unsupported=True` when the runtime said it lacks a kernel or feature
(onnxruntime NOT_IMPLEMENTED), so a report can say "unsupported" instead of failing obscurely.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from attndeploy.errors import ValidationError
from attndeploy.interface import Feed, Outputs, Runner  # noqa: F401  (re-exported)
from attndeploy.runtime.names import ATTENTION_MASK, INPUT_IDS


class RunnerError(ValidationError):
    """A runtime could not load or run the model. `unsupported`: it lacks a kernel/feature."""

    def __init__(self, runner: str, message: str, *, unsupported: bool = False) -> None:
        super().__init__(f"{runner}: {message}")
        self.runner = runner
        self.runtime_message = message
        self.unsupported = unsupported


class BaseRunner:
    """Lifecycle shared by the runners: `activate` on enter, `deactivate` on exit."""

    name = "runner"

    def __init__(self) -> None:
        self._active = False

    @property
    def is_active(self) -> bool:
        return self._active

    def activate(self) -> BaseRunner:
        if not self._active:
            self._activate()
            self._active = True
        return self

    def deactivate(self) -> None:
        if self._active:
            self._deactivate()
            self._active = False

    def _activate(self) -> None:
        """Load the model (subclasses)."""

    def _deactivate(self) -> None:
        """Release the model (subclasses)."""

    def __enter__(self) -> BaseRunner:
        return self.activate()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.deactivate()

    def _require_active(self) -> None:
        if not self._active:
            raise ValidationError(f"{self.name} is not active; use it in a `with` block")

    def infer(self, feed: Feed) -> Outputs:
        raise NotImplementedError


class TorchRunner(BaseRunner):
    """PyTorch eager under `torch.inference_mode` (the reference of every parity check)."""

    def __init__(self, model: Any, name: str = "torch") -> None:
        super().__init__()
        self.model = model
        self.name = name

    def _activate(self) -> None:
        self.model.eval()

    def infer(self, feed: Feed) -> Outputs:
        import torch

        self._require_active()
        ids = torch.from_numpy(np.ascontiguousarray(feed[INPUT_IDS], dtype=np.int64))
        mask = torch.from_numpy(np.ascontiguousarray(feed[ATTENTION_MASK], dtype=np.int64))
        with torch.inference_mode():
            raw = self.model(ids, mask, details=True)
        out: Outputs = {"logits": raw["logits"].float().cpu().numpy()}
        if "gates" in raw:
            out["gates"] = raw["gates"].bool().cpu().numpy()
        if "gate_logits" in raw:
            out["gate_logits"] = raw["gate_logits"].float().cpu().numpy()
        crf = getattr(getattr(self.model, "head", None), "crf", None)
        if crf is not None:  # a CRF tagger's export holds its Viterbi path: `tag_ids`
            with torch.inference_mode():
                out["tag_ids"] = crf.viterbi(raw["logits"], mask != 0).cpu().numpy()
        return out


def _ort_error(exc: BaseException) -> tuple[str, bool]:
    """(message, unsupported) of an onnxruntime exception."""
    kind = type(exc).__name__
    message = str(exc).strip() or kind
    unsupported = kind == "NotImplemented" or "NOT_IMPLEMENTED" in message
    return message, unsupported


class OrtRunner(BaseRunner):
    """onnxruntime with graph optimizations `all` (ORT_ENABLE_ALL) or `none` (ORT_DISABLE_ALL)."""

    OPTIMIZATIONS = ("all", "none")

    def __init__(
        self,
        path: Path | str | bytes,
        optimization: str = "all",
        providers: Sequence[str] | None = None,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        if optimization not in self.OPTIMIZATIONS:
            raise ValidationError(
                f"unknown onnxruntime optimization {optimization!r}; valid: all, none"
            )
        if threads is not None and threads < 1:
            raise ValidationError(f"threads must be >= 1, got {threads}")
        self.path = path
        self.optimization = optimization
        self.providers = list(providers) if providers else ["CPUExecutionProvider"]
        self.threads = threads
        self.name = f"onnxruntime[{optimization}]"
        self.session: Any = None

    def _activate(self) -> None:
        import onnxruntime as ort

        from attndeploy.runtime.sessions import FATAL_ONLY, create_session

        available = set(ort.get_available_providers())
        missing = [p for p in self.providers if p not in available]
        if missing:
            raise RunnerError(
                self.name,
                f"execution provider(s) {', '.join(missing)} not available in this onnxruntime "
                f"(available: {', '.join(sorted(available))})",
                unsupported=True,
            )
        try:  # FATAL only: a failing run is reported through RunnerError, not logged to stderr
            self.session = create_session(self.path, providers=self.providers,
                                          optimization=self.optimization,
                                          threads=self.threads or None,
                                          log_severity=FATAL_ONLY)
        except Exception as exc:  # onnxruntime raises its own pybind types; keep the message
            message, unsupported = _ort_error(exc)
            raise RunnerError(self.name, message, unsupported=unsupported) from exc

    def _deactivate(self) -> None:
        self.session = None

    @property
    def output_names(self) -> list[str]:
        self._require_active()
        return [o.name for o in self.session.get_outputs()]

    def infer(self, feed: Feed) -> Outputs:
        self._require_active()
        names = self.output_names
        import onnxruntime as ort

        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        try:
            values = self.session.run(names, dict(feed), run_options)
        except Exception as exc:  # onnxruntime raises its own pybind types; keep the message
            message, unsupported = _ort_error(exc)
            raise RunnerError(self.name, message, unsupported=unsupported) from exc
        return dict(zip(names, values, strict=True))


class ReferenceRunner(BaseRunner):
    """`onnx.reference.ReferenceEvaluator` on the model with its local functions inlined."""

    def __init__(self, path: Path | str) -> None:
        super().__init__()
        self.path = Path(path)
        self.name = "onnx-reference"
        self.evaluator: Any = None

    def _activate(self) -> None:
        import onnx
        import onnx.inliner
        import onnx.reference

        try:
            model = onnx.load(str(self.path))
            # onnx 1.23: the reference LeakyRelu rejects attribute references inside functions.
            model = onnx.inliner.inline_local_functions(model)
            self.evaluator = onnx.reference.ReferenceEvaluator(model)
        except Exception as exc:  # the evaluator raises many types; keep its message
            raise RunnerError(
                self.name, f"{type(exc).__name__}: {exc}",
                unsupported=isinstance(exc, NotImplementedError),
            ) from exc
        self._outputs = list(self.evaluator.output_names)

    def _deactivate(self) -> None:
        self.evaluator = None

    def infer(self, feed: Feed) -> Outputs:
        self._require_active()
        try:
            values = self.evaluator.run(None, dict(feed))
        except Exception as exc:  # the evaluator raises many types; keep its message
            raise RunnerError(
                self.name, f"{type(exc).__name__}: {exc}",
                unsupported=isinstance(exc, NotImplementedError),
            ) from exc
        return {name: np.asarray(v) for name, v in zip(self._outputs, values, strict=True)}
