"""Layer-by-layer comparison of an exported model: where does it diverge?

    report = compare_checkpoint("runs/ea", "runs/ea.onnx")             # PyTorch vs the export
    report = compare_module(model, "my.onnx", feeds=[{"x": x, ...}])    # any nn.Module
    report = compare_models("fp32.onnx", "int8.onnx", feeds=[feed])     # two ONNX files
    print(report.verdict)          # first divergence: layer 2 (EvolvingAttention), inside ...
    report.ranked()                # attention nodes and blocks, the largest added error first

What is compared, on the same inputs: every `attndeploy` node's outputs (the k-th node in graph
order is the k-th op call of the PyTorch forward pass, or the k-th node of the reference ONNX
model), every block's output (`graph`: the values that leave the ModuleList item holding an
attention layer, found from the module scopes torch.onnx records; the `standard` variant, which
has no `attndeploy` node, is compared this way), and the model's outputs. The model under test
runs once in onnxruntime (all graph optimizations unless told otherwise) with those values
exposed as outputs (`expose`); PyTorch runs once with its op calls recorded and forward hooks
on the blocks (`capture`). A block's PyTorch output tensors are matched to the values leaving
its scope by shape. For the first `attndeploy` node that diverges, `inside` finds why at the
node's own inputs, down to the first op of its function body.

Refused before any work (ValidationError): a file that is missing, not ONNX or not made by
attndeploy; an export from another checkpoint (weights SHA-256); shapes beyond the model's
max_seq; two models for `compare_models` whose inputs, outputs, `attndeploy` nodes or weights
differ; a PyTorch model whose op calls are not the export's `attndeploy` nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from attndeploy.debug.capture import Recording, recording_modules, recording_op_calls
from attndeploy.debug.families import checkpoint_hook
from attndeploy.debug.graph import GraphLayers, registered_attention
from attndeploy.debug.inside import ReferenceCall, node_attributes
from attndeploy.debug.options import DebugOptions
from attndeploy.debug.report import DebugReport
from attndeploy.debug.session import Progress, Session, exposed_values, node_values, pair_by_shape
from attndeploy.debug.sources import (
    check_feeds,
    check_same_model,
    chosen_shapes,
    feed_label,
    load_onnx,
    numpy_feeds,
    summary,
)
from attndeploy.errors import ValidationError
from attndeploy.validate.grid import Shape, make_inputs
from attndeploy.variants.api import AttentionBase

TORCH = "torch"


# ----------------------------------------------------------------------------- PyTorch


def _attention_modules(module: Any) -> dict[str, Any]:
    return {name: m for name, m in module.named_modules() if isinstance(m, AttentionBase)}


def compare_module(
    module: Any,
    onnx_path: Path | str,
    feeds: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    options: DebugOptions | None = None,
    *,
    infer: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]] | None = None,
    feed_labels: Sequence[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> DebugReport:
    """Compare `onnx_path` with the PyTorch `module` it was exported from, layer by layer.

    `feeds`: input dicts keyed by the graph's input names. `infer(feed) -> outputs` runs the
    module (default: `module(**feed)` in eval mode, outputs named as the graph names them).
    """
    options = options or DebugOptions()
    started = time.perf_counter()
    onnx_path = Path(onnx_path)
    if metadata is None:
        candidate, metadata = load_onnx(onnx_path)
    else:
        candidate = onnx.load(str(onnx_path))
    session = Session(candidate, metadata, options)
    graph = session.graph
    feeds = numpy_feeds(feeds)
    check_feeds(graph, feeds, str(onnx_path))
    attention = _attention_modules(module)
    graph.use_root(graph.root_for(attention))
    modules = dict(module.named_modules())
    blocks = graph.blocks(lambda path, cls: isinstance(modules.get(path), AttentionBase))
    if metadata.get("inlined") == "true":
        session.notes.append("the model was exported with its functions inlined: it has no "
                             "attndeploy nodes, so its layers are compared by block outputs")
    if graph.scoped and not blocks:
        session.notes.append("no block of the graph holds an attention layer of the model")
    progress = Progress(options.progress, 2 * len(feeds) + 1)
    session.timings["load_s"] = round(time.perf_counter() - started, 3)
    labels = [feed_label(feed, i, feed_labels) for i, feed in enumerate(feeds)]
    torch_s = onnx_s = 0.0
    with ExitStack() as stack:
        if infer is None:
            from attndeploy.validate.generic import ModuleRunner

            infer = stack.enter_context(ModuleRunner(module, graph.outputs)).infer
        runner = stack.enter_context(session.runner(candidate, exposed_values(graph, blocks)))
        for feed, label in zip(feeds, labels, strict=True):
            t0 = time.perf_counter()
            recording = Recording()
            with recording_op_calls(recording), recording_modules(
                    module, [b.scope for b in blocks], recording):
                expected = dict(infer(feed))
            torch_s += time.perf_counter() - t0
            progress.step(f"torch {label}")
            t0 = time.perf_counter()
            got = runner.infer(feed)
            onnx_s += time.perf_counter() - t0
            progress.step(f"onnxruntime {label}")
            _check_calls(graph, recording, session.notes, onnx_path)
            inputs, outputs = node_values(graph, got)
            reference = [ReferenceCall(call.inputs, call.resolved_attributes(), call.outputs)
                         for call in recording.calls]
            session.compare_nodes(label, inputs, outputs, reference)
            for index, block in enumerate(blocks):
                calls = recording.outputs.get(block.scope, [])
                if len(calls) != 1:
                    continue
                (taken,) = recording.inputs[block.scope]
                session.compare_block(label, block, index,
                                      pair_by_shape(block.values, got, calls[0], graph),
                                      pair_by_shape(block.inputs, got, taken, graph))
            session.compare_outputs(label, feed, got, expected)
    session.timings.update(torch_s=round(torch_s, 3), onnx_s=round(onnx_s, 3))
    skipped = [b.scope for b in blocks if len(recording.outputs.get(b.scope, [])) != 1]
    if skipped:
        session.notes.append(f"blocks called more or less than once are not compared: "
                             f"{', '.join(skipped)}")
    return session.report(TORCH, str(onnx_path), labels, progress, started)


def _check_calls(graph: GraphLayers, recording: Recording, notes: list[str],
                 path: Path) -> None:
    """The op calls of the forward pass are the export's attndeploy nodes, in order."""
    calls = [call.spec.name for call in recording.calls]
    nodes = [c.op_type for c in graph.custom_nodes]
    if not nodes and calls:
        recording.calls.clear()  # an inlined export: nothing to pair them with
        return
    if calls != nodes:
        raise ValidationError(
            f"{path} does not hold this model's attention ops: the model calls "
            f"{summary(calls)}, the graph has the attndeploy nodes {summary(nodes)}; compare "
            "the file exported from this model"
        )


def compare_checkpoint(
    checkpoint_dir: Path | str,
    onnx_path: Path | str,
    options: DebugOptions | None = None,
    *,
    shapes: str | Sequence[Shape | str | tuple[int, int]] | None = None,
    seed: int = 0,
) -> DebugReport:
    """Compare a checkpoint's export with the checkpoint, layer by layer, on `shapes` (default
    one batch of 4 rows of 17 tokens, seq clipped to the model's max_seq; validate's
    deterministic inputs: right-padded token ids). A family that makes its own inputs
    (`debug.families`: an image model's random images, `shapes` its batch sizes) gives the
    model and the inputs itself."""
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.validate.runners import TorchRunner
    from attndeploy.validate.validator import _read_target

    onnx_path = Path(onnx_path)
    own = checkpoint_hook(checkpoint_dir, "debug_checkpoint")
    if own is not None:
        _, metadata = load_onnx(onnx_path)
        module, feeds, labels = own(Path(checkpoint_dir), onnx_path, metadata, shapes, seed)
        return compare_module(module, onnx_path, feeds, options, feed_labels=labels)
    ckpt = read_checkpoint(Path(checkpoint_dir))
    target = _read_target(onnx_path, ckpt)  # refuses other checkpoints' exports
    chosen = chosen_shapes(shapes, target.max_seq, f"{onnx_path} (metadata max_seq)")
    feeds = [make_inputs(shape, ckpt.model_config.vocab_size, seed) for shape in chosen]
    with TorchRunner(ckpt.model) as runner:
        return compare_module(ckpt.model, onnx_path, feeds, options, infer=runner.infer,
                              feed_labels=[str(s) for s in chosen], metadata=target.metadata)


# ----------------------------------------------------------------------------- two ONNX files


def compare_models(
    reference_onnx: Path | str,
    candidate_onnx: Path | str,
    feeds: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    options: DebugOptions | None = None,
    *,
    feed_labels: Sequence[str] | None = None,
) -> DebugReport:
    """Compare `candidate_onnx` with `reference_onnx` (e.g. int8 or fp16 against fp32), layer
    by layer, on `feeds` (input dicts keyed by the graph's input names). No PyTorch.

    The k-th `attndeploy` node of one is compared with the k-th of the other, blocks (found in
    the reference's module scopes) by the names of the values that leave them, outputs by name.
    `report.ranked()` orders the layers by the error each adds; `layer.nodes` names the
    reference graph's nodes of a layer (what a quantizer's exclusion list takes).
    """
    options = options or DebugOptions()
    started = time.perf_counter()
    reference, ref_meta = load_onnx(reference_onnx, "reference ONNX file")
    candidate, cand_meta = load_onnx(candidate_onnx, "ONNX file")
    session = Session(candidate, cand_meta, options)
    ref_graph, graph = GraphLayers(reference), session.graph
    session.layout = ref_graph
    check_same_model(ref_graph, graph, ref_meta, cand_meta,
                     (str(reference_onnx), str(candidate_onnx)))
    feeds = numpy_feeds(feeds)
    check_feeds(graph, feeds, str(candidate_onnx))
    if bool(graph.custom_nodes) != bool(ref_graph.custom_nodes):  # one was inlined at export
        graph.forget_custom_nodes()
        ref_graph.forget_custom_nodes()
        session.notes.append("one of the models has its functions inlined: attndeploy nodes "
                             "are not compared, blocks are")
    blocks = ref_graph.blocks(registered_attention(_layer_classes()))
    known = set(graph.producer) | set(graph.inputs) | set(graph.initializers)
    missing = sorted({v for b in blocks for v in (*b.inputs, *b.values) if v not in known})
    if missing:
        session.notes.append(f"{len(missing)} block value(s) of the reference are not in the "
                             f"model under test and are not compared: {summary(missing)}")
    progress = Progress(options.progress, 2 * len(feeds) + 1)
    session.timings["load_s"] = round(time.perf_counter() - started, 3)
    labels = [feed_label(feed, i, feed_labels) for i, feed in enumerate(feeds)]
    ref_values = exposed_values(ref_graph, blocks)
    cand_values = [v for v in exposed_values(graph, blocks) if v in known]
    reference_s = onnx_s = 0.0
    with session.runner(reference, ref_values) as ref_runner, \
            session.runner(candidate, cand_values) as runner:
        for feed, label in zip(feeds, labels, strict=True):
            t0 = time.perf_counter()
            want = ref_runner.infer(feed)
            reference_s += time.perf_counter() - t0
            progress.step(f"reference {label}")
            t0 = time.perf_counter()
            got = runner.infer(feed)
            onnx_s += time.perf_counter() - t0
            progress.step(f"model {label}")
            ref_inputs, ref_outputs = node_values(ref_graph, want)
            calls = [ReferenceCall(i, node_attributes(c.node), o) for c, i, o in
                     zip(ref_graph.custom_nodes, ref_inputs, ref_outputs, strict=True)]
            inputs, outputs = node_values(graph, got)
            session.compare_nodes(label, inputs, outputs, calls)
            for index, block in enumerate(blocks):
                pairs, entering = ([(v, got[v], want[v]) for v in names
                                    if v in got and v in want
                                    and np.asarray(want[v]).dtype.kind in "fb"]
                                   for names in (block.values, block.inputs))
                session.compare_block(label, block, index, pairs, entering)
            session.compare_outputs(label, feed, got, want)
    session.timings.update(reference_s=round(reference_s, 3), onnx_s=round(onnx_s, 3))
    return session.report(str(reference_onnx), str(candidate_onnx), labels, progress, started)


def _layer_classes() -> list[str]:
    """The class paths ("module.Class") of the registered variants' layers."""
    from attndeploy.variants.registry import variant_specs

    return [spec.layer.replace(":", ".") for spec in variant_specs()]


__all__ = ["compare_checkpoint", "compare_models", "compare_module"]
