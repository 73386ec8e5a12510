"""One comparison in progress: the graph under test, what it exposes, and the layer results
gathered feed by feed (`engine.Accumulator`); at the end the report, with the look inside the
first diverging node (`inside`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from attndeploy.debug.engine import Accumulator
from attndeploy.debug.expose import ExposedRunner
from attndeploy.debug.graph import Block, GraphLayers
from attndeploy.debug.inside import ReferenceCall, look_inside
from attndeploy.debug.options import DebugOptions, tolerances_for
from attndeploy.debug.report import DebugReport, LayerResult
from attndeploy.debug.sources import model_dtype
from attndeploy.errors import ConfigError
from attndeploy.runtime.names import ATTENTION_MASK, META_HEAD, META_PREFIX
from attndeploy.validate.families import FamilyChecks, family_checks


class Progress:
    """Steps on a rich Progress or a callback (completed, total, description)."""

    def __init__(self, target: Any, total: int) -> None:
        self.target, self.total, self.done = target, total, 0
        self.task = target.add_task("debug compare", total=total) \
            if hasattr(target, "add_task") else None

    def step(self, description: str) -> None:
        self.done += 1
        if self.task is not None:
            self.target.update(self.task, completed=self.done, description=description)
        elif callable(self.target):
            self.target(self.done, self.total, description)


@dataclass
class NodeData:
    """One feed's values around the custom nodes (for the look inside)."""

    inputs: list[list[np.ndarray]]
    outputs: list[list[np.ndarray]]
    reference: list[ReferenceCall]


def node_values(graph: GraphLayers, values: Mapping[str, np.ndarray]) -> tuple[list, list]:
    inputs = [[values[name] for name in c.node.input] for c in graph.custom_nodes]
    outputs = [[values[name] for name in c.node.output] for c in graph.custom_nodes]
    return inputs, outputs


def exposed_values(graph: GraphLayers, blocks: Sequence[Block]) -> list[str]:
    names = [n for c in graph.custom_nodes for n in (*c.node.input, *c.node.output)]
    return [*names, *(v for block in blocks for v in (*block.inputs, *block.values))]


def _output_names(graph: GraphLayers, node_index: int) -> list[str]:
    custom = graph.custom_nodes[node_index]
    function = graph.function_of(custom.node)
    if function is not None and len(function.output) == len(custom.node.output):
        return list(function.output)
    return [f"output_{i}" for i in range(len(custom.node.output))]


def _gate_logits_of(graph: GraphLayers, node_index: int, inputs: Sequence[np.ndarray]
                    ) -> tuple[np.ndarray | None, np.ndarray | None]:
    custom = graph.custom_nodes[node_index]
    function = graph.function_of(custom.node)
    names = list(function.input) if function is not None else []
    by_name = dict(zip(names, inputs, strict=False))
    mask = by_name.get("key_padding_mask")
    return by_name.get("gate_logits"), None if mask is None else np.asarray(mask, bool)


def _mask_of(feed: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The real tokens [B, T] of a feed: its `attention_mask`, or its one bool [B, T] input."""
    if ATTENTION_MASK in feed and np.ndim(feed[ATTENTION_MASK]) == 2:
        return np.asarray(feed[ATTENTION_MASK]) != 0
    masks = [v for v in feed.values() if np.asarray(v).dtype == np.bool_ and np.ndim(v) == 2]
    return np.asarray(masks[0]) if len(masks) == 1 else None


def _family_checks(metadata: Mapping[str, str]) -> FamilyChecks | None:
    """The checks part of the model family an export records (its `head`): which outputs are
    per token (compared on real tokens only) and what decision is compared; None for a model
    without one (`--factory`'s)."""
    head = metadata.get(META_HEAD[len(META_PREFIX):])  # the metadata's keys lack the prefix
    if not head:
        return None
    try:
        return family_checks(head)
    except ConfigError:
        return None


class Session:
    """One comparison: the candidate graph, its layers, the accumulated results."""

    def __init__(self, candidate: onnx.ModelProto, metadata: Mapping[str, str],
                 options: DebugOptions) -> None:
        self.options = options
        self.candidate = candidate
        self.graph = GraphLayers(candidate)
        self.layout = self.graph  # the graph whose order and scopes the layers take
        self.tolerance, self.flip_tolerance = tolerances_for(options, model_dtype(candidate,
                                                                               metadata))
        self.results = Accumulator(self.tolerance, self.flip_tolerance)
        self.checks = _family_checks(metadata)
        self.notes: list[str] = []
        self.timings: dict[str, float] = {}
        self.node_data: dict[str, NodeData] = {}
        if not self.graph.scoped:
            self.notes.append("the graph's nodes carry no module scopes (torch.onnx's "
                              "name_scopes metadata): block outputs cannot be located")

    def runner(self, model: onnx.ModelProto, values: Sequence[str]) -> ExposedRunner:
        return ExposedRunner(model, values, optimization=self.options.optimization,
                             providers=self.options.providers, threads=self.options.threads)

    # ------------------------------------------------------------------ one feed

    def compare_nodes(self, feed: str, inputs: list, outputs: list,
                      reference: list[ReferenceCall]) -> None:
        for custom, placed, mine, theirs in zip(self.graph.custom_nodes,
                                                self.layout.custom_nodes, outputs, reference,
                                                strict=True):
            layer = self.results.layer("node", custom.index, f"layer {custom.index}",
                                       custom.op_type, placed.scope, placed.position,
                                       (placed.node.name,) if placed.node.name else ())
            for got, want in zip(inputs[custom.index], theirs.inputs, strict=False):
                self.results.add_input(layer, got, want)
            gate_logits, mask = _gate_logits_of(self.graph, custom.index, theirs.inputs)
            for name, got, want in zip(_output_names(self.graph, custom.index), mine,
                                       theirs.outputs, strict=False):
                self.results.add(layer, name, got, want, feed, gate_logits=gate_logits,
                                 valid=mask)
        self.node_data[feed] = NodeData(inputs, outputs, reference)

    def compare_block(self, feed: str, block: Block, index: int,
                      pairs: Sequence[tuple[str, np.ndarray, np.ndarray]],
                      entering: Sequence[tuple[str, np.ndarray, np.ndarray]] = ()) -> None:
        """`pairs` (name, got, want) of the values leaving it; `entering` of those entering."""
        layer = self.results.layer("block", index, f"block {block.scope}", block.class_name,
                                   block.scope, block.position, block.nodes, block.matmuls)
        for name, got, want in pairs:
            self.results.add(layer, name, got, want, feed)
        for _, got, want in entering:
            self.results.add_input(layer, got, want)

    def compare_outputs(self, feed: str, feed_values: Mapping[str, np.ndarray],
                        got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> None:
        mask = _mask_of(feed_values)
        end = len(self.layout.nodes)
        for index, name in enumerate(self.layout.outputs):
            if name not in want or name not in got:
                continue
            layer = self.results.layer("output", index, f"output {name}", "", None,
                                       self.layout.producer.get(name, end) + end)
            checks = self.checks
            decides = checks is not None and name == checks.decision_output
            self.results.add(layer, name, got[name], want[name], feed,
                             gate_logits=want.get("gate_logits"), valid=mask,
                             per_token=checks is not None and name in checks.per_token_outputs,
                             agreement=checks.agreement if decides else None,
                             agreement_name=checks.agreement_name if decides else "")

    # ------------------------------------------------------------------ the end

    def report(self, reference: str, candidate: str, shapes: list[str],
               progress: Progress, started: float) -> DebugReport:
        from attndeploy.validate.report import environment

        layers = self.results.results()
        report = DebugReport(reference, candidate, self.tolerance, self.flip_tolerance, shapes,
                             layers, notes=self.notes, environment=environment())
        first = report.first_divergence
        if first is not None and first.kind == "node" and self.options.inside:
            t0 = time.perf_counter()
            report.inside = self._look_inside(first)
            self.timings["inside_s"] = round(time.perf_counter() - t0, 3)
        progress.step("done")
        self.timings["total_s"] = round(time.perf_counter() - started, 3)
        report.timings = dict(self.timings)
        return report

    def _look_inside(self, first: LayerResult) -> Any:
        feed = next((first.shapes[name] for name, c in first.values.items() if not c.passed),
                    next(iter(self.node_data)))
        data = self.node_data[feed]
        custom = self.graph.custom_nodes[first.index]
        return look_inside(self.graph, custom, data.inputs[first.index],
                           data.outputs[first.index], data.reference[first.index],
                           self.tolerance, self.flip_tolerance)


def pair_by_shape(values: Sequence[str], got: Mapping[str, np.ndarray],
                   tensors: Sequence[np.ndarray], graph: GraphLayers
                   ) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Each PyTorch output tensor of a block with the value leaving its scope of that shape (the
    last computed, where several have it); bool and float values only."""
    free = [v for v in values if v in got and np.asarray(got[v]).dtype.kind in "fb"]
    pairs = []
    for tensor in tensors:
        same = [v for v in free if np.shape(got[v]) == tensor.shape
                and (np.asarray(got[v]).dtype == np.bool_) == (tensor.dtype == np.bool_)]
        if not same:
            continue
        chosen = max(same, key=lambda v: graph.producer.get(v, -1))
        free.remove(chosen)
        pairs.append((chosen, got[chosen], tensor))
    return pairs
