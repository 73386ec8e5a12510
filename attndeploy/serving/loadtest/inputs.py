"""Request inputs and checks: request pools, vocab and max_seq from ONNX, reference outputs.

Three kinds of pool: random token ids (an id model), texts of random vocabulary words (a text
model) and the lines of a text file (either kind: an id model gets them tokenized here by the
runtime tokenizer, the code a text model runs in the server). Pools are
`pool[length_index][i]`; a text file's lines make one group of requests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import LoadTestError
from attndeploy.runtime.names import ATTENTION_MASK, GATES, INPUT_IDS, LOGITS, META_MAX_SEQ
from attndeploy.serving.client.triton import TritonRunner, make_inputs
from attndeploy.serving.loadtest.config import FIRST_TOKEN_ID, LoadTestConfig
from attndeploy.serving.packaging.text_model_names import PARAM_TRUNCATE, TEXT

PARAM_MAX_SEQ = "MAX_SEQ"  # the python flavour's config parameter, see model_config


def _load_onnx(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _json_metadata(model: Any) -> Iterator[dict[str, Any]]:
    """The metadata_props values that are JSON objects (attndeploy records its config so)."""
    from attndeploy.jsonread import parse_json

    for prop in model.metadata_props:
        try:
            value = parse_json(prop.value, prop.key, error=LoadTestError)
        except LoadTestError:  # not JSON, or nested too deep: not a record
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
    ids = {INPUT_IDS}
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
                INPUT_IDS: ids.astype(dtypes[INPUT_IDS]),
                ATTENTION_MASK: np.ones_like(ids).astype(dtypes[ATTENTION_MASK]),
            }
            entries.append(_PoolEntry(feed, make_inputs(feed, config.protocol)))
        pool.append(entries)
    return pool


# --------------------------------------------------------------------------- texts

TEXT_INPUT = TEXT  # a text model's input
IMAGE_INPUT = "image"  # an image model's (`packaging.image_model.IMAGE`)


@dataclass(frozen=True)
class TextSource:
    """What the load tester knows of a model's texts: the runtime tokenizer and the limits.

    `truncate`: the served text model cuts long texts (its TRUNCATE parameter)."""

    tokenizer: Any  # attndeploy.runtime.tokenizer.WordTokenizer
    max_seq: int
    labels: tuple[str, ...]
    family: Any  # the model family's runtime part (`runtime.families.runtime_part`)
    gated: bool
    truncate: bool = False

    @property
    def tagging(self) -> bool:
        """Whether the logits are per token (the name it had before families)."""
        return self.family.LOGITS_RANK == 3


def text_source(onnx_path: Path, served: dict[str, Any] | None = None) -> TextSource | None:
    """The tokenizer, labels and limits in an exported model's metadata (None without a
    tokenizer); `served`: a served text model's config (its MAX_SEQ and TRUNCATE win)."""
    from attndeploy.runtime.metadata import parse_metadata

    model = _load_onnx(onnx_path)
    meta = parse_metadata({p.key: p.value for p in model.metadata_props}, str(onnx_path),
                          outputs=[output.name for output in model.graph.output])
    if meta.tokenizer is None:
        return None
    max_seq = meta.max_seq
    truncate = False
    if served is not None:
        max_seq = served_max_seq(served) or max_seq
        raw = served.get("parameters", {}).get(PARAM_TRUNCATE, {})
        truncate = isinstance(raw, dict) and raw.get("string_value") == "true"
    return TextSource(meta.tokenizer, max_seq, meta.labels, meta.runtime, meta.gated, truncate)


def read_text_file(path: Path) -> list[str]:
    """The non-blank lines of `path` (UTF-8), without their line ends, read by the one reader
    of text files (`runtime.lines`: a line over the limit per text is refused, naming it,
    without being read whole); LoadTestError if none, or for a line it cannot read."""
    from attndeploy.runtime.lines import read_lines

    texts = [line for line in read_lines(Path(path), error=LoadTestError) if line.strip()]
    if not texts:
        raise LoadTestError(f"the text file {path} has no non-blank line to send")
    return texts


def check_texts(texts: Sequence[str], source: TextSource, path: Path) -> list[Any]:
    """Every text encoded by the runtime (`encode_text`); a text the model would refuse fails
    now, naming its line, since every request that carries it would fail."""
    from attndeploy.runtime.text import TextError, encode_text

    encoded = []
    for index, text in enumerate(texts):
        try:
            encoded.append(encode_text(source.tokenizer, text, max_seq=source.max_seq,
                                       index=index, truncate=source.truncate))
        except TextError as exc:
            raise LoadTestError(f"{path}: non-blank line {index + 1} {exc.reason}; the model "
                                "would refuse every request that carries it") from None
    return encoded


def vocabulary_words(tokenizer: Any) -> list[str]:
    """The words of a tokenizer's vocabulary that encode as one token, themselves: no special
    token, punctuation or WordPiece continuation (`##s`), nor a word its normalizer changes
    (WordPiece lowercases and strips accents) or splits (CJK characters). Read through the
    runtime tokenizer interface (`decode`, `tokenize`, `framing`), so any tokenizer a model
    carries gives its words."""
    before, after = tokenizer.framing
    words = []
    for word in tokenizer.decode(range(FIRST_TOKEN_ID, len(tokenizer))):
        if not word.isalnum():
            continue
        tokens = tokenizer.tokenize(word)
        if len(tokens) == before + 1 + after and tokens[before] == word:
            words.append(word)
    return words


def random_texts(config: LoadTestConfig, source: TextSource | None) -> list[list[str]]:
    """`texts[length_index]`: `pool_size * batch` texts of random vocabulary words
    (`vocabulary_words`), that many tokens each with the tokenizer's special tokens (WordPiece's
    [CLS] and [SEP] take two of them; at least one word). Without a vocabulary: that many
    unknown words, which the model takes as `<unk>`."""
    rng = np.random.default_rng(config.seed)
    words = vocabulary_words(source.tokenizer) if source is not None else []
    framing = sum(source.tokenizer.framing) if source is not None else 0
    words = words or [f"x{i}" for i in range(32)]
    groups = []
    for seq in config.seq_lengths:
        count = max(1, int(seq) - framing)
        picks = rng.integers(0, len(words), (config.pool_size * config.batch, count))
        groups.append([" ".join(words[i] for i in row) for row in picks])
    return groups


def _batches(texts: Sequence[Any], batch: int, count: int | None = None) -> list[list[Any]]:
    """Consecutive groups of `batch` texts, wrapping around, enough to use each text once (or
    `count` groups)."""
    if count is None:
        count = -(-len(texts) // batch)
    return [[texts[(i * batch + j) % len(texts)] for j in range(batch)] for i in range(count)]


def build_text_pool(config: LoadTestConfig, groups: list[list[str]]) -> list[list[_PoolEntry]]:
    """A text model's pool: `text` BYTES [batch, 1] per request, from each group of texts."""
    pool = []
    for texts in groups:
        entries = []
        for rows in _batches(texts, config.batch):
            feed = {TEXT_INPUT: np.array([[t.encode("utf-8")] for t in rows], dtype=object)}
            entries.append(_PoolEntry(feed, make_inputs(feed, config.protocol)))
        pool.append(entries)
    return pool


def build_tokenized_pool(config: LoadTestConfig, encoded: list[Any],
                         dtypes: dict[str, np.dtype]) -> list[list[_PoolEntry]]:
    """An id model's pool from encoded texts: `batch` texts per request, right-padded."""
    from attndeploy.runtime.tokenizer import pad_sequences

    entries = []
    for rows in _batches(encoded, config.batch):
        ids, mask = pad_sequences([e.ids for e in rows])  # [batch, T] each
        feed = {INPUT_IDS: ids.astype(dtypes[INPUT_IDS]),
                ATTENTION_MASK: mask.astype(dtypes[ATTENTION_MASK])}
        entries.append(_PoolEntry(feed, make_inputs(feed, config.protocol)))
    return [entries]


# onnxruntime's dynamic quantization: one activation scale over the whole input (per batch)
PER_BATCH_QUANTIZERS = ("DynamicQuantizeLinear", "DynamicQuantizeMatMul")


def scales_per_batch(model: Any) -> bool:
    """Whether the ONNX graph quantizes activations with one scale over the whole batch
    (onnxruntime's dynamic int8, whoever made it; `quantize`'s default per-row scales leave none):
    an answer computed inside a batch then differs from the same request run alone (on the
    MiniLMs, logits by up to 1.12, and 6-14 of 827 held-out labels; benchmarks/README.md,
    `int8_batching.py`), so only a request that ran alone can be checked exactly."""
    return any(node.op_type in PER_BATCH_QUANTIZERS for node in model.graph.node)


class _Reference:
    """In-process onnxruntime on the same ONNX file; expected outputs cached per pool entry."""

    def __init__(self, path: Path, served_outputs: Sequence[str]) -> None:
        from attndeploy.runtime.sessions import create_session

        self.session = create_session(path)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs() if o.name in served_outputs]
        self._cache: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def expected(self, key: tuple[int, int], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if key not in self._cache:
            run_feed = {n: v.astype(np.int64) for n, v in feed.items() if n in self.inputs}
            values = self.session.run(self.outputs, run_feed)
            self._cache[key] = dict(zip(self.outputs, values, strict=True))
        return self._cache[key]


class _TextReference:
    """What a text model should answer, from in-process onnxruntime on its id model's ONNX file:
    the texts encoded and the logits decoded by the runtime (`encode_text`, `decode_batch`).

    Expected: the prediction contract's wire form (`runtime.contract.encode_wire`, the codec the
    text model answers with) of those predictions. Cached per pool entry."""

    def __init__(self, path: Path, source: TextSource, served_outputs: Sequence[str]) -> None:
        from attndeploy.runtime.sessions import create_session

        self.source = source
        # every fusion, as the server's onnxruntime runs the file: an int8 model's answers then
        # match the server's to the rounding, not only to int8's noise
        self.session = create_session(path, disabled_fusions=())
        self.run_outputs = [LOGITS, GATES] if source.gated else [LOGITS]
        self.outputs = list(served_outputs)
        self._cache: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def expected(self, key: tuple[int, int], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if key not in self._cache:
            self._cache[key] = self._expected(feed[TEXT_INPUT])
        return self._cache[key]

    def _expected(self, texts: np.ndarray) -> dict[str, np.ndarray]:
        from attndeploy.runtime.contract import encode_wire
        from attndeploy.runtime.text import decode_batch, encode_text
        from attndeploy.runtime.tokenizer import pad_sequences

        source = self.source
        encoded = [encode_text(source.tokenizer, raw.decode("utf-8"), max_seq=source.max_seq,
                               truncate=source.truncate) for raw in texts[:, 0].tolist()]
        ids, mask = pad_sequences([e.ids for e in encoded])  # [B, T]
        values = self.session.run(self.run_outputs, {INPUT_IDS: ids, ATTENTION_MASK: mask})
        gates = values[1] if source.gated else None
        predictions = decode_batch(values[0], gates, [e.tokens for e in encoded], source.labels,
                                   family=source.family)
        out = encode_wire(predictions, gated=source.gated, family=source.family)
        return {name: value for name, value in out.items() if name in self.outputs}


def _input_dtypes(
    runner: TritonRunner, config: LoadTestConfig, served: dict[str, Any]
) -> dict[str, np.dtype]:
    """The numpy dtypes the served model declares for input_ids and attention_mask (`served`:
    its configuration)."""
    from tritonclient.utils import triton_to_np_dtype

    metadata = runner.metadata()
    dtypes = {}
    if metadata.input(TEXT_INPUT) is not None:  # a text model
        names: tuple[str, ...] = (TEXT_INPUT,)
    elif metadata.input(IMAGE_INPUT) is not None:  # an image model
        names = (IMAGE_INPUT,)
    else:
        names = (INPUT_IDS, ATTENTION_MASK)
    for name in names:
        spec = metadata.input(name)
        if spec is None:
            declared = ", ".join(s.name for s in metadata.inputs) or "none"
            raise LoadTestError(
                f"Model '{config.model}' has no input '{name}' (its inputs: {declared}); the "
                "load tester drives the model-level interface input_ids / attention_mask, "
                "a text model's text or an image model's image."
            )
        dtypes[name] = np.dtype(triton_to_np_dtype(spec.datatype))
    max_batch = int(served.get("max_batch_size", 0))
    if max_batch > 0 and config.batch > max_batch:
        raise LoadTestError(
            f"batch {config.batch} exceeds the max_batch_size {max_batch} of model "
            f"'{config.model}'; lower --batch-size."
        )
    return dtypes
