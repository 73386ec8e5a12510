"""Request inputs and checks: request pools, vocab and max_seq from ONNX, reference outputs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import LoadTestError
from attndeploy.serving.client import TritonRunner, make_inputs
from attndeploy.serving.loadtest.config import FIRST_TOKEN_ID, LoadTestConfig

META_MAX_SEQ = "attndeploy.max_seq"  # an export's own limit (export --max-seq), see onnx_info
PARAM_MAX_SEQ = "MAX_SEQ"  # the python flavour's config parameter, see model_config


def _load_onnx(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _json_metadata(model: Any) -> Iterator[dict[str, Any]]:
    """The metadata_props values that are JSON objects (attndeploy records its config so)."""
    for prop in model.metadata_props:
        try:
            value = json.loads(prop.value)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(value, dict):
            yield value


def vocab_from_onnx(path: Path | Any) -> int | None:
    """The vocabulary size of an exported model (a path or a loaded ModelProto), or None.

    First a `vocab_size` in a JSON value of the model's metadata_props (attndeploy records its
    model config there), else the row count of the initializer that a Gather indexes with
    `input_ids` (through Cast/Identity nodes).
    """
    model = _load_onnx(path) if isinstance(path, (str, Path)) else path
    for value in _json_metadata(model):
        if isinstance(value.get("vocab_size"), int):
            return int(value["vocab_size"])
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    ids = {"input_ids"}
    for node in model.graph.node:  # nodes are topologically sorted
        if node.op_type in ("Cast", "Identity") and node.input and node.input[0] in ids:
            ids.update(node.output)
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in ids:
            shape = shapes.get(node.input[0])
            if shape:
                return int(shape[0])
    return None


def max_seq_from_onnx(path: Path | Any) -> int | None:
    """The longest sequence an exported model takes (a path or a loaded ModelProto), or None.

    `attndeploy.max_seq` (an export's own, possibly lower, limit), else a `max_seq` in a JSON
    value of the metadata_props (the model config); None for a file without either.
    """
    model = _load_onnx(path) if isinstance(path, (str, Path)) else path
    for prop in model.metadata_props:
        if prop.key == META_MAX_SEQ and prop.value.isdigit() and int(prop.value) > 0:
            return int(prop.value)
    for value in _json_metadata(model):
        limit = value.get("max_seq")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit
    return None


def served_max_seq(model_config: dict[str, Any]) -> int | None:
    """The `MAX_SEQ` parameter of a served model's config (python flavour), or None."""
    raw = model_config.get("parameters", {}).get(PARAM_MAX_SEQ, {})
    value = str(raw.get("string_value", "")) if isinstance(raw, dict) else ""
    return int(value) if value.isdigit() and int(value) > 0 else None


def check_seq_lengths(config: LoadTestConfig, max_seq: int | None, source: str) -> None:
    """Refuse, before any load, a sequence length the model cannot take (every request would
    fail); `source` says where `max_seq` comes from."""
    if max_seq is None:
        return
    over = [int(s) for s in config.seq_lengths if s > max_seq]
    if over:
        raise LoadTestError(
            f"seq length {over[0]} exceeds the max_seq {max_seq} of model '{config.model}' "
            f"({source}): every request would fail; use lengths up to {max_seq} (--seq)."
        )


@dataclass(frozen=True)
class _PoolEntry:
    feed: dict[str, np.ndarray]  # input_ids, attention_mask: [batch, seq]
    inputs: list[Any]  # tritonclient InferInput objects built once from `feed`


def _build_pool(config: LoadTestConfig, vocab: int, dtypes: dict[str, np.dtype]) -> list[
    list[_PoolEntry]
]:
    """`pool[length_index][i]`: `pool_size` random requests for each sequence length."""
    rng = np.random.default_rng(config.seed)
    pool = []
    for seq in config.seq_lengths:
        entries = []
        for _ in range(config.pool_size):
            ids = rng.integers(FIRST_TOKEN_ID, vocab, (config.batch, int(seq)))  # [batch, seq]
            feed = {
                "input_ids": ids.astype(dtypes["input_ids"]),
                "attention_mask": np.ones_like(ids).astype(dtypes["attention_mask"]),
            }
            entries.append(_PoolEntry(feed, make_inputs(feed)))
        pool.append(entries)
    return pool


class _Reference:
    """In-process onnxruntime on the same ONNX file; expected outputs cached per pool entry."""

    def __init__(self, path: Path, served_outputs: Sequence[str]) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs() if o.name in served_outputs]
        self._cache: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def expected(self, key: tuple[int, int], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if key not in self._cache:
            run_feed = {n: v.astype(np.int64) for n, v in feed.items() if n in self.inputs}
            values = self.session.run(self.outputs, run_feed)
            self._cache[key] = dict(zip(self.outputs, values, strict=True))
        return self._cache[key]


def _input_dtypes(
    runner: TritonRunner, config: LoadTestConfig, served: dict[str, Any]
) -> dict[str, np.dtype]:
    """The numpy dtypes the served model declares for input_ids and attention_mask (`served`:
    its configuration)."""
    from tritonclient.utils import triton_to_np_dtype

    metadata = runner.metadata()
    dtypes = {}
    for name in ("input_ids", "attention_mask"):
        spec = metadata.input(name)
        if spec is None:
            declared = ", ".join(s.name for s in metadata.inputs) or "none"
            raise LoadTestError(
                f"Model '{config.model}' has no input '{name}' (its inputs: {declared}); the "
                "load tester drives the model-level interface input_ids / attention_mask."
            )
        dtypes[name] = np.dtype(triton_to_np_dtype(spec.datatype))
    max_batch = int(served.get("max_batch_size", 0))
    if max_batch > 0 and config.batch > max_batch:
        raise LoadTestError(
            f"batch {config.batch} exceeds the max_batch_size {max_batch} of model "
            f"'{config.model}'; lower --batch."
        )
    return dtypes
