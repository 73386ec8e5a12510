"""What a comparison reads: the ONNX files (refused unless attndeploy made them), the check
that two files are one model, and the inputs (validate's token-id feeds, or the caller's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from attndeploy.check_defaults import INPUT_SEED
from attndeploy.debug.graph import GraphLayers
from attndeploy.errors import ValidationError
from attndeploy.jsonread import parse_json
from attndeploy.runtime.names import META_PREFIX
from attndeploy.validate.grid import Shape, as_shapes, check_shapes, make_inputs

DEFAULT_SHAPE = (4, 17)  # one batch that mixes padded and full rows, seq clipped to max_seq


def load_onnx(path: Path | str, role: str = "ONNX file") -> tuple[onnx.ModelProto, dict]:
    """The model and its attndeploy metadata (without the prefix); refuses what is not an
    attndeploy export."""
    path = Path(path)
    if path.is_dir():
        raise ValidationError(f"{role} {path} is a folder; give the exported ONNX file")
    if not path.is_file():
        raise ValidationError(f"{role} {path} does not exist")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf raises DecodeError and others; keep the message
        raise ValidationError(f"{path} is not a readable ONNX file: "
                              f"{' '.join(str(exc).split())[:200]}") from None
    metadata = {p.key[len(META_PREFIX):]: p.value for p in model.metadata_props
                if p.key.startswith(META_PREFIX)}
    if not metadata.get("version"):
        raise ValidationError(f"{path} was not made by attndeploy export (it has no attndeploy "
                              "metadata); export the model with attndeploy and compare that file")
    return model, metadata


def model_dtype(model: onnx.ModelProto, metadata: Mapping[str, str]) -> str:
    """float32 or float16: the metadata's, else float16 when a float output is."""
    if metadata.get("dtype") in ("float32", "float16"):
        return metadata["dtype"]
    fp16 = any(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in model.graph.output)
    return "float16" if fp16 else "float32"


def numpy_feeds(feeds: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> list[dict]:
    if isinstance(feeds, Mapping):
        feeds = [feeds]
    out = []
    for feed in feeds:
        out.append({k: v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
                    for k, v in feed.items()})
    if not out:
        raise ValidationError("give at least one feed (a dict of input name -> array)")
    return out


def check_feeds(graph: GraphLayers, feeds: list[dict], where: str) -> None:
    for index, feed in enumerate(feeds):
        if sorted(feed) != sorted(graph.inputs):
            raise ValidationError(f"feed {index} has inputs {sorted(feed)}; {where} takes "
                                  f"{sorted(graph.inputs)}")


def feed_label(feed: Mapping[str, np.ndarray], index: int, labels: Sequence[str] | None) -> str:
    if labels is not None:
        return labels[index]
    first = next(iter(feed.values()))
    return f"feed{index}:{'x'.join(str(d) for d in first.shape)}"


def summary(names: Sequence[str]) -> str:
    if not names:
        return "none"
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def check_same_model(reference: GraphLayers, candidate: GraphLayers, ref_meta: Mapping,
                     cand_meta: Mapping, names: tuple[str, str]) -> None:
    """Refuse two models that are not the same model (module docstring)."""
    ref_name, cand_name = names
    problems = []
    if sorted(reference.inputs) != sorted(candidate.inputs):
        problems.append(f"inputs {reference.inputs} and {candidate.inputs}")
    if sorted(reference.outputs) != sorted(candidate.outputs):
        problems.append(f"outputs {reference.outputs} and {candidate.outputs}")
    ref_ops = [c.op_type for c in reference.custom_nodes]
    cand_ops = [c.op_type for c in candidate.custom_nodes]
    if ref_ops and cand_ops and ref_ops != cand_ops:
        problems.append(f"attndeploy nodes {summary(ref_ops)} and {summary(cand_ops)}")
    ref_sha, cand_sha = ref_meta.get("weights_sha256"), cand_meta.get("weights_sha256")
    if ref_sha and cand_sha and ref_sha != cand_sha:
        problems.append(f"weights sha256 {ref_sha[:12]}… and {cand_sha[:12]}…")
    if problems:
        raise ValidationError(f"{ref_name} and {cand_name} are not the same model: they have "
                              f"{'; '.join(problems)}")


def chosen_shapes(shapes: str | Sequence[Any] | None, max_seq: int,
                  where: str) -> tuple[Shape, ...]:
    """The shapes asked for (refused beyond max_seq), or the default one clipped to it."""
    if shapes is None:
        batch, seq = DEFAULT_SHAPE
        return (Shape(batch, min(seq, max_seq)),)
    chosen = as_shapes(shapes)
    check_shapes(chosen, max_seq, where)
    return chosen


def token_feeds(vocab_size: int, max_seq: int, shapes: str | Sequence[Any] | None = None,
                seed: int = INPUT_SEED, where: str = "the model") -> tuple[list[dict], list[str]]:
    """validate's token-id feeds (`input_ids`, `attention_mask`, right-padded) for `shapes`
    (default one batch of 4 x 17, seq clipped to max_seq), and their labels."""
    chosen = chosen_shapes(shapes, max_seq, f"{where} (max_seq {max_seq})")
    return [make_inputs(shape, vocab_size, seed) for shape in chosen], [str(s) for s in chosen]


def metadata_feeds(metadata: Mapping[str, str], shapes: str | Sequence[Any] | None = None,
                   seed: int = INPUT_SEED, where: str = "the model"
                   ) -> tuple[list[dict], list[str]]:
    """`token_feeds` for a checkpoint's export, from its metadata (vocabulary size, max_seq):
    the inputs of `compare_models` when the checkpoint is not at hand; a family's own
    (`random_feeds`, `debug.families`: an image model's random images) where it makes them."""
    from attndeploy.debug.families import metadata_hook

    own = metadata_hook(metadata, "random_feeds")
    if own is not None:
        return own(metadata, shapes, seed, where)
    try:
        config = parse_json(metadata.get("config") or "{}", f"{where}'s config metadata",
                            error=ValidationError)
        vocab = int(config["vocab_size"])
        max_seq = int(metadata.get("max_seq") or config["max_seq"])
    except (ValueError, KeyError, TypeError):
        raise ValidationError(f"{where} records no model config to draw token ids from; give "
                              "its checkpoint or --factory MODULE:FACTORY for the inputs") from None
    return token_feeds(vocab, max_seq, shapes, seed, where)


def checkpoint_feeds(checkpoint: Path | str, shapes: str | Sequence[Any] | None = None,
                     seed: int = INPUT_SEED) -> tuple[list[dict], list[str]]:
    """The inputs a checkpoint makes for `compare_models` (`--against` with a checkpoint): its
    family's own (`checkpoint_feeds`, `debug.families`), else `token_feeds` of its vocabulary
    and max_seq."""
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.debug.families import checkpoint_hook

    own = checkpoint_hook(checkpoint, "checkpoint_feeds")
    if own is not None:
        return own(Path(checkpoint), shapes, seed)
    config = read_checkpoint(Path(checkpoint)).model_config
    return token_feeds(config.vocab_size, config.max_seq, shapes, seed, str(checkpoint))
