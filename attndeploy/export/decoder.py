"""Export a causal language model with its cache: one ONNX graph for prefill and decode
(issue #49).

Letters: b batch, n new tokens, P cached tokens (GA-Net: the open ones), T = tokens seen.

The graph (the names Optimum uses, `attndeploy.models.decoder.model` explains the state):

    inputs   input_ids [b, n] int64, attention_mask [b, T] int64 (1 = real; left padding),
             position_ids [b, n] int64, then each `past_key_values.{l}.{entry}` (P may be 0)
    outputs  logits [b, n, V] float32, then each `present.{l}.{entry}`

The first step feeds the empty past (`CausalLM.empty_state`, P = 0), so the same graph prefills
and decodes. Every attention layer of a custom variant is one `attndeploy` node with its
function (standard attention is plain ONNX). The metadata tells a generic loop what to carry:

    attndeploy.family        "text-generation"
    attndeploy.variant, attndeploy.version, attndeploy.max_seq
    attndeploy.config        the DecoderConfig as JSON
    attndeploy.tokenizer     the tokenizer record as JSON ("" when the checkpoint has none)
    attndeploy.decoder_state JSON list of {past, present, dtype, dims}; dims hold "batch",
                             "past" (the axis that grows) and fixed sizes: a P = 0 array of
                             each is the empty past
    attndeploy.generation    JSON {bos_token_id, eos_token_id, pad_token_id, vocab_size,
                             max_seq, inputs: [the first three input names]}
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import onnx
import torch
from torch import nn

from attndeploy import __version__
from attndeploy.errors import ExportError
from attndeploy.export.tracing import attach_functions, to_onnx, tracing_settings
from attndeploy.fsutil import atomic_write_bytes
from attndeploy.generation.metadata import (
    META_CONFIG,
    META_FAMILY,
    META_GENERATION,
    META_MAX_SEQ,
    META_STATE,
    META_TOKENIZER,
    META_VARIANT,
    META_VERSION,
)
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.models.decoder.model import CausalLM, positions_of
from attndeploy.opspec.bodies import DOMAIN

OPSET = 18
INPUTS = ("input_ids", "attention_mask", "position_ids")
TRACED_BATCH, TRACED_PAST, TRACED_NEW = 2, 7, 3  # none 0 or 1, none alike


class FlatDecoder(nn.Module):
    """The model with flat inputs and outputs: (ids, mask, positions, *past) ->
    (logits, *present), the state in `names` order."""

    def __init__(self, model: CausalLM, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, input_ids, attention_mask, position_ids, *past):
        logits, present = self.model(input_ids, attention_mask, position_ids,
                                      dict(zip(self.names, past, strict=True)))
        return (logits, *[present[name] for name in self.names])


@dataclass
class DecoderExport:
    """What was written: the file, its inputs/outputs and the custom nodes per op type."""

    path: Path
    inputs: list[str]
    outputs: list[str]
    custom_nodes: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict:
        return {"onnx": str(self.path), "inputs": self.inputs, "outputs": self.outputs,
                "custom_nodes": self.custom_nodes}


def _trace_inputs(model: CausalLM) -> tuple[tuple, list[str]]:
    """Contiguous example inputs after a prefill of TRACED_PAST tokens (left-padded rows)."""
    vocab, total = model.config.vocab_size, TRACED_PAST + TRACED_NEW
    ids = torch.randint(4, max(vocab, 5), (TRACED_BATCH, total),
                        generator=torch.Generator().manual_seed(0)) % vocab  # [b, T]
    mask = (torch.arange(total)[None, :] >= torch.tensor([0, 2])[:, None]).long()  # [b, T]
    positions = positions_of(mask != 0)  # [b, T]
    names = list(model.empty_state(TRACED_BATCH))
    with torch.no_grad():
        _, past = model(ids[:, :TRACED_PAST], mask[:, :TRACED_PAST],
                        positions[:, :TRACED_PAST], model.empty_state(TRACED_BATCH))
    args = (ids[:, TRACED_PAST:], mask, positions[:, TRACED_PAST:],
            *[past[name] for name in names])
    return tuple(a.clone().contiguous() for a in args), names


def export_onnx_model(model: CausalLM, tokenizer: LMTokenizer | None) -> onnx.ModelProto:
    """The graph of the module docstring, with its functions and metadata."""
    model = model.eval()
    specs = model.state_specs()
    args, names = _trace_inputs(model)
    batch = torch.export.Dim("batch", min=1, max=1024)
    new = torch.export.Dim("new_tokens", min=1, max=model.config.max_seq)
    past = torch.export.Dim("past", min=0, max=model.config.max_seq)
    state_dims = tuple({i: batch if d == "batch" else past for i, d in enumerate(spec.dims)
                        if isinstance(d, str)} for spec in specs)
    dynamic = ({0: batch, 1: new}, {0: batch, 1: torch.export.Dim.AUTO}, {0: batch, 1: new},
               state_dims)
    try:
        with tracing_settings():  # quiet (torch.onnx's torchvision warnings) and faster
            program = torch.export.export(FlatDecoder(model, names), args,
                                          dynamic_shapes=dynamic)
            onnx_program = to_onnx(program, OPSET, SimpleNamespace(
                input_names=[*INPUTS, *[s.past for s in specs]],
                output_names=["logits", *[s.present for s in specs]]))
    except (RuntimeError, ValueError, TypeError) as exc:  # torch.export's own errors
        raise ExportError(f"the decoder did not trace: {str(exc).splitlines()[0][:300]}") from exc
    proto = attach_functions(onnx_program.model_proto, OPSET, inline=False)
    config = model.config
    specials = tokenizer if tokenizer is not None else LMTokenizer  # the word tokenizer's ids
    metadata = {
        META_FAMILY: "text-generation",
        META_VARIANT: config.variant,
        META_VERSION: __version__,
        META_MAX_SEQ: str(config.max_seq),
        META_CONFIG: json.dumps(config.to_dict()),
        META_TOKENIZER: json.dumps(tokenizer.to_dict()) if tokenizer is not None else "",
        META_STATE: json.dumps([s.to_dict() for s in specs]),
        META_GENERATION: json.dumps({
            "bos_token_id": specials.BOS_ID, "eos_token_id": specials.EOS_ID,
            "pad_token_id": specials.PAD_ID, "vocab_size": config.vocab_size,
            "max_seq": config.max_seq, "inputs": list(INPUTS)}),
    }
    del proto.metadata_props[:]
    for key, value in metadata.items():
        proto.metadata_props.add(key=key, value=value)
    return proto


def check_structure(proto: onnx.ModelProto, model: CausalLM) -> dict[str, int]:
    """The attention layers are `attndeploy` nodes with functions (standard: plain ONNX), the
    state is named in and out; ExportError otherwise. Returns the custom nodes per op type."""
    nodes = Counter(n.op_type for n in proto.graph.node if n.domain == DOMAIN)
    functions = {f.name for f in proto.functions}
    if model.config.variant != "standard" and sum(nodes.values()) < model.config.n_layers:
        raise ExportError(f"expected one {DOMAIN} node per attention layer "
                          f"({model.config.n_layers}), found {dict(nodes)}")
    missing = sorted(set(nodes) - functions)
    if missing:
        raise ExportError(f"{DOMAIN} nodes without a function body: {', '.join(missing)}")
    outputs = [o.name for o in proto.graph.output]
    wanted = ["logits", *[s.present for s in model.state_specs()]]
    if outputs != wanted:
        raise ExportError(f"the graph's outputs {outputs} are not {wanted}")
    return dict(nodes)


def export_decoder(model: CausalLM, tokenizer: LMTokenizer | None, out: Path) -> DecoderExport:
    """Export and check `model`, then write `out` atomically."""
    proto = export_onnx_model(model, tokenizer)
    nodes = check_structure(proto, model)
    atomic_write_bytes(Path(out), proto.SerializeToString())
    return DecoderExport(Path(out), [i.name for i in proto.graph.input],
                         [o.name for o in proto.graph.output], nodes)


def export_checkpoint(checkpoint: Path, out: Path) -> DecoderExport:
    """A decoder checkpoint folder -> `out` (the hook `attndeploy export` calls through the
    text-generation family's checks part)."""
    from attndeploy.models.decoder.checkpoint import load_decoder

    loaded = load_decoder(Path(checkpoint))
    return export_decoder(loaded.model, loaded.tokenizer, Path(out))
