"""What gating words costs a bag-of-words model: naive Bayes reading a share of each text.

GA-Net classifies from the words its gates leave open (about 37 % on the real sets). This script
asks what that costs when the words are chosen well, with the `train --data` baseline (naive
Bayes on the same split as `train_real.py`) reading only some words of each held-out text:

- `every_word`: the baseline itself;
- `same_types`: the word types with the most class information, the same in every text (what a
  per-word gate network such as `mlp` can express), the cut placed so that the mean share of
  words kept per text is the density;
- `per_text`: each text's own most informative words, round(density x length), at least one
  (what a gate network that reads the whole text, such as `bilstm`, can express).

A word's class information is max_c log p(w|c) - log mean_c p(w|c) under the fitted baseline;
unseen words have none. Fast (seconds); writes `nb_gating.json`.

    .venv/bin/python benchmarks/nb_gating.py [--sets fortunes,debian] [--densities 0.2,0.3,0.37]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import train_real  # noqa: E402  (the same split and loader)

from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.training.baseline import NaiveBayes, fit_baseline_model  # noqa: E402


def word_information(model: NaiveBayes) -> dict[str, float]:
    likelihood = model.log_likelihood[:-1]  # [V, C]; the last row is every unseen word
    mean = np.log(np.exp(likelihood).mean(1))  # [V]
    information = likelihood.max(1) - mean  # [V]
    return {word: float(information[column]) for word, column in model.vocabulary.items()}


def keep_same_types(docs: list[list[str]], info: dict[str, float], density: float
                    ) -> list[list[str]]:
    """Words above one information cut, the cut bisected to the mean kept share `density`."""
    def kept(cut: float) -> list[list[str]]:
        return [[w for w in doc if info.get(w, 0.0) > cut]
                or [max(doc, key=lambda w: info.get(w, 0.0))] for doc in docs]

    low, high = 0.0, max(info.values())
    for _ in range(40):
        middle = (low + high) / 2
        if _share(kept(middle), docs) > density:
            low = middle
        else:
            high = middle
    return kept(high)


def keep_per_text(docs: list[list[str]], info: dict[str, float], density: float
                  ) -> list[list[str]]:
    return [sorted(doc, key=lambda w: -info.get(w, 0.0))[:max(1, round(density * len(doc)))]
            for doc in docs]


def _share(kept: list[list[str]], docs: list[list[str]]) -> float:
    return float(np.mean([len(k) / len(d) for k, d in zip(kept, docs, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="fortunes,debian")
    parser.add_argument("--densities", default="0.2,0.3,0.37")
    parser.add_argument("--data-dir", type=Path,
                        default=ROOT / "benchmarks" / "results" / "real_text")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    split = json.loads((args.data_dir / "manifest.json").read_text())["split"]
    rows = []
    for name in args.sets.split(","):
        data = train_real._load(args.data_dir, name, split)
        fit_labels = np.concatenate([data.train_set.labels.numpy(), data.val_set.labels.numpy()])
        held_labels = data.eval_set.labels.numpy()
        fit_docs, held_docs = data.tokens["fit"], data.tokens["held_out"]
        model = fit_baseline_model(fit_docs, fit_labels, len(data.label_names))
        info = word_information(model)
        rows.append({"set": name, "selection": "every_word", "density": 1.0,
                     "accuracy": round(model.accuracy(held_docs, held_labels), 4)})
        for density in (float(d) for d in args.densities.split(",")):
            for selection, keep in (("same_types", keep_same_types),
                                    ("per_text", keep_per_text)):
                kept = keep(held_docs, info, density)
                rows.append({"set": name, "selection": selection,
                             "density": round(_share(kept, held_docs), 3),
                             "accuracy": round(model.accuracy(kept, held_labels), 4)})
        for row in rows:
            if row["set"] == name:
                print(json.dumps(row))
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "nb_gating.json", json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out / 'nb_gating.json'}")


if __name__ == "__main__":
    main()
