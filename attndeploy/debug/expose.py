"""Run a model in onnxruntime with chosen intermediate values exposed as graph outputs.

A value becomes an output by name alone (an untyped `ValueInfoProto`): onnxruntime infers its
type, so custom-domain nodes whose outputs onnx's shape inference cannot type need no value_info.
A value that is a graph input or an initializer is not computed: it is served from the feed or
the model's own tensor. onnxruntime may fuse less around an exposed value (a fusion must not hide
it); the values themselves are what the graph computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx.numpy_helper

from attndeploy.validate.runners import BaseRunner, OrtRunner


def expose(model: onnx.ModelProto, names: Iterable[str]) -> list[str]:
    """Add `names` (in order, once) to `model`'s graph outputs, in place; the names added."""
    present = {v.name for v in model.graph.output}
    served = {v.name for v in model.graph.input} | {t.name for t in model.graph.initializer}
    added = []
    for name in dict.fromkeys(names):
        if name and name not in present and name not in served:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            added.append(name)
    return added


class ExposedRunner(BaseRunner):
    """`validate`'s onnxruntime runner on `model` with `values` exposed: `infer(feed)` returns
    the graph's outputs and every exposed value, graph inputs and initializers included. The
    model is changed in place (its graph gains outputs)."""

    def __init__(self, model: onnx.ModelProto, values: Sequence[str], *,
                 optimization: str = "all", providers: Sequence[str] | None = None,
                 threads: int | None = None) -> None:
        super().__init__()
        self.model, self.values = model, list(values)
        self.settings = {"optimization": optimization, "providers": providers,
                         "threads": threads}
        self.name = f"onnxruntime[{optimization}]"
        self._runner = OrtRunner(b"", **self.settings)  # the model's bytes come on activate
        self._constants: dict[str, np.ndarray] = {}

    def _activate(self) -> None:
        wanted = set(self.values)
        self._constants = {t.name: onnx.numpy_helper.to_array(t)
                           for t in self.model.graph.initializer if t.name in wanted}
        expose(self.model, self.values)
        self._runner.path = self.model.SerializeToString()
        self._runner.activate()

    def _deactivate(self) -> None:
        self._runner.deactivate()
        self._runner.path = b""

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._require_active()
        out = self._runner.infer(dict(feed))
        wanted = set(self.values)
        out.update({k: np.asarray(v) for k, v in feed.items() if k in wanted})
        out.update(self._constants)
        return out
