"""Export a translation model: an encoder graph, run once per source, and a decoder graph with
its cache (issue #51), in one folder under Optimum's file and tensor names.

Letters: b batch, S source tokens, n new target tokens, P cached target tokens.

    encoder_model.onnx
      inputs   input_ids [b, S] int64, attention_mask [b, S] int64 (1 = real; right padding)
      outputs  last_hidden_state [b, S, D], encoder_attention_mask [b, S] bool (the source
               tokens the cross-attention reads: GA-Net's closed ones are False), then every
               `present.{l}.encoder.key` / `.value` [b, H, S, d] (the cross keys and values,
               computed here once) and Evolving Attention's `present.{l}.encoder.evolving_rows`
               [b, H, 2, S] (zeros: the rows above the first target token)
    decoder_model.onnx
      inputs   input_ids [b, n] int64, position_ids [b, n] int64, decoder_attention_mask
               [b, P+n] int64 (1 = real target token: a served batch left-pads the caches of
               rows that started later; all ones for one source or a beam), encoder_attention_mask
               [b, S] bool, every `past_key_values.{l}.decoder.*` (the self-attention cache;
               P = 0 on the first step) and `past_key_values.{l}.encoder.*` (the encoder's
               outputs, renamed)
      outputs  logits [b, n, V], every `present.{l}.decoder.*` and Evolving Attention's
               `present.{l}.encoder.evolving_rows` (the cross keys and values do not change and
               are not returned)

The decoder's metadata tells a generic loop (`attndeploy.generation.seq2seq_onnx`) what to
carry: `attndeploy.family` "translation", `attndeploy.config`, `attndeploy.tokenizer` (the BPE
record), `attndeploy.generation` ({bos, eos, pad token ids, vocab_size, max_source,
max_target}), `attndeploy.metrics` (the checkpoint's BLEU, chrF and baselines, for
`attndeploy info EXPORT`; {} when exported from a bare model) and `attndeploy.decoder_state`:
JSON list of {past, present, dtype, dims} for
every decoder input it carries (`present` null for the constant cross keys and values; dims
hold "batch", "past" (the axis that grows), "source" and fixed sizes).
"""

from __future__ import annotations

import json
import warnings
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
from attndeploy.generation.hf_tokenizer import HFTokenizer
from attndeploy.generation.metadata import (
    META_CONFIG,
    META_FAMILY,
    META_GENERATION,
    META_STATE,
    META_TOKENIZER,
    META_VARIANT,
    META_VERSION,
)
from attndeploy.models.seq2seq.model import Memory, Seq2Seq
from attndeploy.opspec.bodies import DOMAIN

OPSET = 18
ENCODER_FILE, DECODER_FILE = "encoder_model.onnx", "decoder_model.onnx"
FAMILY = "translation"
META_METRICS = "attndeploy.metrics"
GROWS = {"key": 2, "value": 2, "key_mask": 1, "evolving_rows": 3}  # the decoder's past axis
TRACED_BATCH, TRACED_SOURCE, TRACED_PAST, TRACED_NEW = 2, 6, 3, 2


def present_name(past: str) -> str:
    return "present." + past[len("past_key_values."):]


class FlatEncoder(nn.Module):
    def __init__(self, model: Seq2Seq, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, input_ids, attention_mask):
        memory = self.model.encode(input_ids, attention_mask)
        state = self.model.cross_state(memory)
        return (memory.hidden, memory.mask, *[state[name] for name in self.names])


class FlatDecoder(nn.Module):
    def __init__(self, model: Seq2Seq, inputs: list[str], outputs: list[str]) -> None:
        super().__init__()
        self.model, self.inputs, self.outputs = model, inputs, outputs

    def forward(self, input_ids, position_ids, decoder_attention_mask, encoder_attention_mask,
                *state):
        memory = Memory(encoder_attention_mask, encoder_attention_mask)  # hidden unused here
        logits, present = self.model.decode(input_ids, memory,
                                            dict(zip(self.inputs, state, strict=True)),
                                            position_ids, decoder_attention_mask)
        return (logits, *[present[name] for name in self.outputs])


@dataclass
class Seq2SeqExport:
    folder: Path
    encoder_outputs: list[str]
    decoder_inputs: list[str]
    decoder_outputs: list[str]
    custom_nodes: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict:
        return {"folder": str(self.folder), "encoder": str(self.folder / ENCODER_FILE),
                "decoder": str(self.folder / DECODER_FILE),
                "encoder_outputs": self.encoder_outputs, "decoder_inputs": self.decoder_inputs,
                "decoder_outputs": self.decoder_outputs, "custom_nodes": self.custom_nodes}


def _example(model: Seq2Seq) -> tuple[tuple, tuple, list[str], list[str], list[str]]:
    """Encoder args, decoder args after a prefill of TRACED_PAST tokens, the cross names, the
    decoder's carried input names and its changing output names (all past names)."""
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ids = torch.randint(4, max(vocab, 5), (TRACED_BATCH, TRACED_SOURCE), generator=gen) % vocab
    mask = (torch.arange(TRACED_SOURCE)[None] < torch.tensor([TRACED_SOURCE, 4])[:, None]).long()
    target = torch.randint(4, max(vocab, 5), (TRACED_BATCH, TRACED_PAST + TRACED_NEW),
                           generator=gen) % vocab
    with torch.no_grad():
        memory = model.encode(ids, mask)
        cross = model.cross_state(memory)
        state = {**cross, **model.empty_self_state(TRACED_BATCH)}
        _, present = model.decode(target[:, :TRACED_PAST], memory, state)
    state.update(present)
    self_names = list(model.empty_self_state(1))
    cross_names = list(cross)
    carried = [*self_names, *cross_names]
    changing = [*self_names, *[n for n in cross_names if n.endswith("evolving_rows")]]
    positions = torch.arange(TRACED_PAST, TRACED_PAST + TRACED_NEW)[None].repeat(TRACED_BATCH, 1)
    seen = torch.ones(TRACED_BATCH, TRACED_PAST + TRACED_NEW, dtype=torch.long)  # [b, P+n]
    seen[1, 0] = 0  # a row whose cache is left-padded by one
    decoder_args = (target[:, TRACED_PAST:], positions, seen, memory.mask,
                    *[state[name] for name in carried])
    return ((ids, mask), tuple(a.clone().contiguous() for a in decoder_args), cross_names,
            carried, changing)


def _dims(model: Seq2Seq, name: str, value: torch.Tensor) -> tuple[str | int, ...]:
    """An entry's dims: "batch", "past" (decoder self state's growing axis), "source"."""
    entry = name.rsplit(".", 1)[-1]
    if ".encoder." in name:
        axis = 2 if entry in ("key", "value") else 3
        return tuple("batch" if i == 0 else "source" if i == axis else size
                     for i, size in enumerate(value.shape))
    axis = GROWS.get(entry)
    return tuple("batch" if i == 0 else "past" if i == axis else size
                 for i, size in enumerate(value.shape))


def _export(module: nn.Module, args: tuple, dynamic: tuple, inputs: list[str],
            outputs: list[str], what: str) -> onnx.ModelProto:
    try:
        with warnings.catch_warnings(), tracing_settings():  # quiet: torchvision warnings
            warnings.simplefilter("ignore")
            program = torch.export.export(module, args, dynamic_shapes=dynamic)
            onnx_program = to_onnx(program, OPSET, SimpleNamespace(input_names=inputs,
                                                                   output_names=outputs))
    except (RuntimeError, ValueError, TypeError) as exc:  # torch.export's own errors
        raise ExportError(f"the {what} did not trace: {str(exc).splitlines()[0][:300]}"
                          ) from exc
    return attach_functions(onnx_program.model_proto, OPSET, inline=False)


def export_onnx_models(model: Seq2Seq, tokenizer: HFTokenizer, metrics: dict | None = None
                       ) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The two graphs of the module docstring, with their functions and metadata."""
    model = model.eval()
    config = model.config
    encoder_args, decoder_args, cross_names, carried, changing = _example(model)
    batch = torch.export.Dim("batch", min=1, max=1024)
    source = torch.export.Dim("source", min=2, max=config.max_source)
    new = torch.export.Dim("new_tokens", min=1, max=config.max_target)
    past = torch.export.Dim("past", min=0, max=config.max_target)
    encoder = _export(
        FlatEncoder(model, cross_names), encoder_args, ({0: batch, 1: source},) * 2,
        ["input_ids", "attention_mask"],
        ["last_hidden_state", "encoder_attention_mask", *map(present_name, cross_names)],
        "encoder")
    values = dict(zip(carried, decoder_args[4:], strict=True))
    dims = {name: _dims(model, name, value) for name, value in values.items()}
    state_dynamic = tuple({i: {"batch": batch, "past": past, "source": source}[d]
                           for i, d in enumerate(dims[name]) if isinstance(d, str)}
                          for name in carried)
    decoder = _export(
        FlatDecoder(model, carried, changing), decoder_args,
        ({0: batch, 1: new}, {0: batch, 1: new}, {0: batch, 1: torch.export.Dim.AUTO},
         {0: batch, 1: source}, state_dynamic),  # the mask's width is P+n: AUTO finds it
        ["input_ids", "position_ids", "decoder_attention_mask", "encoder_attention_mask",
         *carried],
        ["logits", *map(present_name, changing)], "decoder")
    state = [{"past": name, "present": present_name(name) if name in changing else None,
              "dtype": {torch.bool: "bool", torch.float32: "float32"}[values[name].dtype],
              "dims": list(dims[name])} for name in carried]
    metadata = {
        META_FAMILY: FAMILY, META_VARIANT: config.variant, META_VERSION: __version__,
        META_CONFIG: json.dumps(config.to_dict()), META_TOKENIZER: json.dumps(tokenizer.to_dict()),
        META_STATE: json.dumps(state), META_METRICS: json.dumps(metrics or {}),
        META_GENERATION: json.dumps({
            "bos_token_id": tokenizer.BOS_ID, "eos_token_id": tokenizer.EOS_ID,
            "pad_token_id": tokenizer.PAD_ID, "vocab_size": config.vocab_size,
            "max_source": config.max_source, "max_target": config.max_target}),
    }
    for proto in (encoder, decoder):
        del proto.metadata_props[:]
        for key, value in metadata.items():
            proto.metadata_props.add(key=key, value=value)
    return encoder, decoder


def _custom_nodes(*protos: onnx.ModelProto) -> dict[str, int]:
    nodes: Counter = Counter()
    for proto in protos:
        nodes.update(n.op_type for n in proto.graph.node if n.domain == DOMAIN)
        missing = sorted({n.op_type for n in proto.graph.node if n.domain == DOMAIN}
                         - {f.name for f in proto.functions})
        if missing:
            raise ExportError(f"{DOMAIN} nodes without a function body: {', '.join(missing)}")
    return dict(nodes)


def export_seq2seq(model: Seq2Seq, tokenizer: HFTokenizer, out: Path,
                   metrics: dict | None = None) -> Seq2SeqExport:
    """Export and check `model`; write the folder `out` (both files or neither)."""
    from attndeploy.output_set import atomic_directory

    encoder, decoder = export_onnx_models(model, tokenizer, metrics)
    nodes = _custom_nodes(encoder, decoder)
    out = Path(out)
    with atomic_directory(out, replace=True) as staging:
        atomic_write_bytes(staging / ENCODER_FILE, encoder.SerializeToString())
        atomic_write_bytes(staging / DECODER_FILE, decoder.SerializeToString())
    return Seq2SeqExport(out, [o.name for o in encoder.graph.output],
                         [i.name for i in decoder.graph.input],
                         [o.name for o in decoder.graph.output], nodes)


def export_checkpoint(checkpoint: Path, out: Path) -> Seq2SeqExport:
    """A translation checkpoint folder -> the export folder `out` (the hook `attndeploy
    export` calls through the translation family's checks part)."""
    from attndeploy.models.seq2seq.checkpoint import load_seq2seq

    loaded = load_seq2seq(Path(checkpoint))
    return export_seq2seq(loaded.model, loaded.tokenizer, Path(out),
                          loaded.raw.get("metrics", {}))
