"""`quantize_model`: quantize, check against fp32, write only within the tolerances."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from attndeploy.errors import DataError, QuantizeError
from attndeploy.fsutil import (
    atomic_write_bytes,
    check_not_an_input,
    check_output_file,
    check_replaceable,
)
from attndeploy.quantize import check, methods
from attndeploy.quantize.options import QuantizeOptions
from attndeploy.quantize.per_row import per_row_activations
from attndeploy.runtime.model import InferenceModel
from attndeploy.runtime.names import ATTENTION_MASK, INPUT_IDS, META_QUANTIZATION

# GA-Net's gate network, by the class of the module its nodes are traced in: `ConvertedGates` (a
# `GateNetwork`) where a converted Hugging Face model calls it, `GateController` in attndeploy's
# own models (which call the network's `scores`, so torch.onnx records the controller's scope,
# not the network's), `GateNetwork` where a model of one's own calls it directly, and
# `CausalGateNetwork` in a decoder (text generation, attndeploy.variants.ganet.causal).
GATE_NETWORK_CLASSES = ("GateNetwork", "GateController", "ConvertedGates", "CausalGateNetwork")


@dataclass
class Candidate:
    """One quantized model and how it compares with fp32."""

    method: str
    grid: check.GridCheck
    data: check.DataCheck | None
    size_bytes: int
    quantized_nodes: int
    failures: list[str] = field(default_factory=list)
    ranking: list[dict[str, Any]] = field(default_factory=list)  # exclude_worst: the layers
    excluded: list[str] = field(default_factory=list)  # MatMul/Gemm nodes kept in fp32
    gate_network: list[str] = field(default_factory=list)  # GA-Net: those of the gate network
    worst: list[str] = field(default_factory=list)  # exclude_worst: those of the worst layers

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "passed": self.passed, "failures": self.failures,
                "grid": check.to_dict(self.grid), "data": check.to_dict(self.data),
                "size_bytes": self.size_bytes, "quantized_nodes": self.quantized_nodes,
                "excluded": self.excluded, "gate_network": self.gate_network,
                "worst": self.worst, "ranking": self.ranking}


@dataclass
class QuantizeResult:
    source: Path
    out: Path
    options: QuantizeOptions
    candidates: list[Candidate]
    chosen: Candidate | None  # the candidate written; None when none passed
    source_bytes: int

    @property
    def passed(self) -> bool:
        return self.chosen is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source), "out": str(self.out), "written": self.passed,
            "method": self.chosen.method if self.chosen else None,
            "options": asdict(self.options) | {
                "activations": self.options.dynamic_activations},
            "source_bytes": self.source_bytes,
            "candidates": [c.to_dict() for c in self.candidates],
        }

    def raise_for_failure(self) -> None:
        if self.chosen is None:
            reasons = "; ".join(f"{c.method}: {', '.join(c.failures)}" for c in self.candidates)
            raise QuantizeError(f"no int8 model within the tolerances, nothing written "
                                f"({reasons}){_what_to_try(self.options, self.candidates)}")


def _what_to_try(options: QuantizeOptions, candidates: list[Candidate]) -> str:
    """The options that kept the labels of the MiniLMs that missed (benchmarks/README.md), where
    they are off."""
    from attndeploy.quantize.cpu import has_vnni

    tries = []
    if not options.gate_network_fp32 and any(c.grid.gate_flips or (c.data and c.data.gate_flips)
                                             for c in candidates):
        tries.append("--gate-network-fp32 (GA-Net's hard gates flipped)")
    if options.dynamic_activations == "per-batch":
        tries.append("--activations per-row, the default (each token its own activation scale: "
                     "every MiniLM variant kept 99 % of its labels with every layer in int8)")
    if not options.exclude_worst:
        tries.append("--exclude-worst N (the N layers int8 hurts most kept in fp32)")
    if not options.reduce_range and has_vnni() is False:
        tries.append("--reduce-range (7-bit weights, advised on this CPU: it has no VNNI)")
    return f"; try {' or '.join(tries)}" if tries else ""


def _failures(candidate: Candidate, options: QuantizeOptions) -> list[str]:
    found = []
    if candidate.grid.max_logit_change > options.max_logit_change:
        found.append(f"largest logit change {candidate.grid.max_logit_change:.3g} > "
                     f"{options.max_logit_change:g}")
    data = candidate.data
    if data is not None:
        if data.label_agreement is not None and data.label_agreement < options.min_agreement:
            found.append(f"{data.agreement} {data.label_agreement:.2%} on {data.texts} texts "
                         f"< {options.min_agreement:.2%}")
        drop = data.accuracy_drop
        if drop is not None and drop > options.max_accuracy_drop:
            found.append(f"{data.score} {data.int8_accuracy:.4f} against fp32 "
                         f"{data.fp32_accuracy:.4f}, a drop of {drop:.4f} > "
                         f"{options.max_accuracy_drop:g}")
    return found


def _with_metadata(path: Path, source: onnx.ModelProto, record: dict[str, Any]) -> bytes:
    """The quantized model with the fp32 model's metadata (what predict, package and serve read)
    and `attndeploy.quantization`; the functions of the attndeploy nodes are checked to be there."""
    model = onnx.load(str(path))
    del model.metadata_props[:]
    for entry in source.metadata_props:
        if entry.key != META_QUANTIZATION:
            model.metadata_props.append(entry)
    model.metadata_props.append(onnx.StringStringEntryProto(key=META_QUANTIZATION,
                                                            value=json.dumps(record)))
    wanted = {(f.domain, f.name) for f in source.functions}
    if {(f.domain, f.name) for f in model.functions} != wanted:
        raise QuantizeError("quantization lost the attndeploy functions; re-export the model")
    return model.SerializeToString()


def _count_quantized(data: bytes) -> int:
    """The int8 MatMuls: integer MatMul nodes (dynamic, and onnxruntime's fused and QOperator
    forms), and in a QDQ graph the MatMul/Gemm nodes whose weight is dequantized int8. Not the
    QuantizeLinear nodes: per-row activations add one per quantized input, not per MatMul."""
    model = onnx.load_from_string(data)
    integer = {"MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul"}
    dequantized = {out for node in model.graph.node if node.op_type == "DequantizeLinear"
                   for out in node.output}
    return (sum(node.op_type in integer for node in model.graph.node)
            + len(_matmuls_on(model, dequantized)))


def quantize_model(
    source: Path | str, out: Path | str, options: QuantizeOptions | None = None, *,
    data: Path | str | None = None,
) -> QuantizeResult:
    """Quantize the exported model `source` to int8 at `out` (see the package docstring).

    Writes `out` atomically, and only if the int8 model passes every tolerance of `options`;
    returns the comparison either way (`raise_for_failure` turns a miss into a QuantizeError).
    `data`: a JSONL file of labelled texts (the held-out split) for label agreement and accuracy,
    and for static quantization the calibration texts.
    """
    options = options or QuantizeOptions()
    source, out = Path(source), Path(out)
    fp32 = InferenceModel(source, threads=options.threads)  # refuses what is not our export
    check_output_file(out)
    check_not_an_input(out, [source] + ([Path(data)] if data is not None else []))
    check_replaceable(out, force=options.force, error=QuantizeError)
    checks = check.model_checks(fp32)  # what "the same answer" means for its family
    texts = gold = None
    if data is not None:
        texts, gold = checks.read_examples(Path(data), fp32.labels)
    if options.method in ("static", "best") and texts is None:
        raise DataError(f"--method {options.method} calibrates on labelled texts: give --data "
                        "(a JSONL file, e.g. the held-out split)")
    feeds = check.grid_feeds(check.parse_grid(options.grid, fp32.max_seq),
                             fp32.metadata.vocab_size, options.seed)
    proto = onnx.load(str(source))
    gate_network = (gate_network_matmuls(proto)
                    if options.gate_network_fp32 and fp32.gated else [])
    kept = replace(options, exclude=_joined(options.exclude, gate_network))
    wanted = ["dynamic", "static"] if options.method == "best" else [options.method]
    candidates: list[tuple[Candidate, bytes]] = []
    with tempfile.TemporaryDirectory(prefix="attndeploy-quantize-") as scratch:
        private = _private_copy(proto, Path(scratch))
        for method in wanted:
            target = Path(scratch) / f"{method}.onnx"
            calibration = (_calibration_feeds(fp32, texts or [], options)
                           if method == "static" else None)
            _quantize(method, private, target, kept, calibration, shown=source)
            ranking: list[dict[str, Any]] = []
            worst: list[str] = []
            used = kept
            if options.exclude_worst:
                ranking, worst = _worst_layers(source, target, feeds, options,
                                               _weight_matmuls(proto))
                worst = [name for name in worst if name not in kept.exclude]
                used = replace(kept, exclude=_joined(kept.exclude, worst))
                _quantize(method, private, target, used, calibration, shown=source)
            record = {"method": method, "per_channel": options.per_channel,
                      "reduce_range": options.reduce_range,
                      "activations": (options.dynamic_activations if method == "dynamic"
                                      else None),
                      "exclude": list(used.exclude),
                      "gate_network": gate_network,
                      "source_weights_sha256": fp32.metadata.weights_sha256}
            blob = _with_metadata(target, proto, record)
            target.write_bytes(blob)
            int8 = InferenceModel(target, threads=options.threads)
            candidate = Candidate(
                method, check.compare_on_grid(fp32, int8, feeds, checks),
                check.compare_on_texts(fp32, int8, texts, gold, str(data), checks)
                if texts is not None else None,
                len(blob), _count_quantized(blob), ranking=ranking,
                excluded=list(used.exclude), gate_network=gate_network, worst=worst)
            candidate.failures = _failures(candidate, options)
            candidates.append((candidate, blob))
    passing = [(c, blob) for c, blob in candidates if c.passed]
    chosen = None
    if passing:  # the most accurate on the texts, then the fewest label changes on the grid
        chosen, blob = max(passing, key=lambda item: (
            _or_zero(item[0].data.int8_accuracy if item[0].data else None),
            _or_zero(item[0].data.label_agreement if item[0].data else None),
            _or_zero(item[0].grid.label_agreement), -item[0].grid.max_logit_change))
        atomic_write_bytes(out, blob)
    return QuantizeResult(source, out, options, [c for c, _ in candidates], chosen,
                          source.stat().st_size)


def _or_zero(value: float | None) -> float:
    return 0.0 if value is None else value


def gate_network_matmuls(model: onnx.ModelProto) -> list[str]:
    """The MatMul/Gemm nodes of a gated variant's gate network in an exported model (by the
    module scopes torch.onnx records: GA-Net's `GATE_NETWORK_CLASSES`, and the gate machinery
    every registered gated variant names in its spec, `VariantSpec.gating`, e.g. a plug-in's;
    [] for an ungated variant or a graph without scopes).

    `quantize` keeps them in fp32 by default: a hard gate is the sign of the network's logit, so
    int8 error moves the logits near 0 across it. On the GA-Net MiniLM (two seeds), int8 gate
    networks flipped 23-27 of the 9,407 gates of the held-out texts and none in fp32, for some
    50k multiply-adds per token out of 11M (benchmarks/README.md, `quantize_sweep.py`)."""
    from attndeploy.debug.graph import GraphLayers

    return list(GraphLayers(model).matmuls_in_classes(gate_network_classes()))


def gate_network_classes() -> tuple[str, ...]:
    """The class names whose module scopes hold a gate network: GA-Net's, then those of every
    registered gated variant's gate machinery (its `gating` "module:Class")."""
    from attndeploy.variants.registry import variant_specs

    named = [spec.gating.rpartition(":")[2] for spec in variant_specs()
             if spec.gated and spec.gating]
    return tuple(dict.fromkeys((*GATE_NETWORK_CLASSES, *named)))


def _joined(names: tuple[str, ...], more: list[str]) -> tuple[str, ...]:
    """`names` then those of `more` not among them, in order."""
    return tuple(names) + tuple(name for name in more if name not in names)


# onnx.save writes one protobuf of at most 2 GiB; a model near that keeps its weights beside it
EXTERNAL_DATA_BYTES = 1 << 30
PRIVATE_SOURCE = "source.onnx"


def _private_copy(proto: onnx.ModelProto, scratch: Path) -> Path:
    """The source model saved in the scratch folder, for onnxruntime.quantization to read.

    onnxruntime writes `<model>-inferred.onnx` beside the model it is given (its shape-inferred
    copy, deleted at the end): beside the user's model, that would replace a file of that name
    (or the target of a link of that name) without --force, and a Ctrl-C would leave it behind.
    Given this copy, everything it writes stays in the scratch folder. `proto` is loaded with
    its external data, so a model whose weights lie in other files is copied whole."""
    from onnx.external_data_helper import load_external_data_for_model

    private = scratch / PRIVATE_SOURCE
    if proto.ByteSize() <= EXTERNAL_DATA_BYTES:
        onnx.save(proto, str(private))
        return private
    onnx.save(proto, str(private), save_as_external_data=True,
              location=PRIVATE_SOURCE + ".data")
    load_external_data_for_model(proto, str(scratch))  # onnx.save moved the weights out of it
    return private


def _quantize(method: str, source: Path, target: Path, options: QuantizeOptions,
              calibration: list[dict[str, Any]] | None, *, shown: Path) -> None:
    """Quantize `source` (the private copy) into `target`; errors name `shown` (the user's)."""
    try:
        if method == "dynamic":
            methods.quantize_dynamic_file(source, target, options)
            if options.dynamic_activations == "per-row":
                model = onnx.load(str(target))
                per_row_activations(model)
                onnx.save(model, str(target))
        else:
            methods.quantize_static_file(source, target, options, calibration or [])
    except Exception as exc:  # onnxruntime.quantization raises many types
        raise QuantizeError(f"{method} quantization of {shown} failed: {exc}") from exc


def _worst_layers(source: Path, quantized: Path, feeds: list[dict[str, Any]],
                  options: QuantizeOptions, weighted: set[str]
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The layers ranked by the error int8 adds in each (`attndeploy.debug.compare_models` on
    the grid), and the MatMul/Gemm nodes of the `exclude_worst` worst that hold any and that
    int8 quantizes: those with a weight (`weighted`; a product of two activations, such as
    attention's scores, stays fp32 anyway)."""
    from attndeploy.debug import DebugOptions, compare_models

    report = compare_models(source, quantized, feeds,
                            DebugOptions(inside=False, threads=options.threads))
    ranked = [layer for layer in report.ranked() if layer.matmuls]
    ranking = [{"label": layer.label, "added_error": layer.added_error,
                "rel_error": layer.rel_error, "matmuls": list(layer.matmuls)}
               for layer in ranked]
    worst = [name for layer in ranked[: options.exclude_worst] for name in layer.matmuls
             if name in weighted]
    return ranking, worst


def _weight_matmuls(model: onnx.ModelProto) -> set[str]:
    """The names of the main graph's MatMul/Gemm nodes whose second input is an initializer."""
    return {node.name for node in _matmuls_on(
        model, {tensor.name for tensor in model.graph.initializer})}


def _matmuls_on(model: onnx.ModelProto, second_inputs: set[str]) -> list[onnx.NodeProto]:
    """The main graph's MatMul/Gemm nodes whose second input is one of `second_inputs`."""
    return [node for node in model.graph.node if node.op_type in ("MatMul", "Gemm")
            and len(node.input) > 1 and node.input[1] in second_inputs]


def _calibration_feeds(model: InferenceModel, texts: list[str], options: QuantizeOptions
                       ) -> list[dict[str, Any]]:
    """The first `calibration_texts` texts as `text_feeds`."""
    return text_feeds(model, texts[: options.calibration_texts])


def text_feeds(model: InferenceModel, texts: list[str], batch: int = 32
               ) -> list[dict[str, Any]]:
    """`texts` tokenized as predict does (truncated at the model's max_seq), in right-padded
    batches of up to `batch`: the model's feeds, for static calibration and for anything else
    that runs the labelled texts outside `predict`."""
    from attndeploy.runtime.text import encode_texts
    from attndeploy.runtime.tokenizer import pad_sequences

    if model.tokenizer is None:
        raise DataError(f"{model.path} holds no vocabulary, so it cannot read --data texts")
    encoded = encode_texts(model.tokenizer, texts, max_seq=model.max_seq, truncate=True)
    feeds = []
    for start in range(0, len(encoded), batch):
        ids, mask = pad_sequences([e.ids for e in encoded[start:start + batch]])  # [B, T] each
        feeds.append({INPUT_IDS: ids, ATTENTION_MASK: mask})
    return feeds
