"""SmolLM2-135M, every variant at its warm start: exported with its cache and validated
(issue #49, "Done when": "SmolLM2-135M, standard and every converted variant, exports and passes
`validate`"). For each variant: `convert_causal_lm` of the GGUF model, `export_decoder`, then
`validate_decoder` (PyTorch with the cache against full recomputation; onnxruntime against
PyTorch on the prefill and 8 decode steps over prompt lengths 1, 5, 12 and batch sizes 1, 3;
64 greedy tokens of 3 prompts), and the greedy tokens of real prompts against transformers'
own `generate`. Writes DIR/smollm2_validate.json.

Run: `.venv/bin/python benchmarks/smollm2_validate.py [--variants ...] [--out DIR]`
(needs `make real-data`; about 6 minutes a variant on 2 idle cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.export.decoder import export_decoder  # noqa: E402
from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.generation.loop import DecoderModel  # noqa: E402
from attndeploy.integrations.hf_decoder import (  # noqa: E402
    convert_causal_lm,
    load_hf_causal_lm,
    tokenizer_of,
)
from attndeploy.validate.decoder import validate_decoder  # noqa: E402

PROMPTS = ["The capital of France is", "Once upon a time, in a small village,",
           "def fibonacci(n):"]


def main() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from smollm2_finetune import gguf_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="standard,qvi,ganet,evolving")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(2)
    loaded = load_hf_causal_lm(gguf_path())
    tokenizer = tokenizer_of(loaded)
    expected = []
    for prompt in PROMPTS:
        ids = loaded.tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids),
                                        max_new_tokens=args.new_tokens, do_sample=False)
        expected.append([t for t in out[0, ids.shape[1]:].tolist()
                         if t != tokenizer.EOS_ID])
    results = []
    for variant in args.variants.split(","):
        started = time.monotonic()
        model = convert_causal_lm(loaded.model, variant, max_seq=512)
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / f"smol-{variant}.onnx"
            export_decoder(model, tokenizer, path)
            report = validate_decoder(model, path)
            generated = DecoderModel(path, threads=2).generate(PROMPTS, args.new_tokens)
        same = [g.token_ids == e[:len(g.token_ids)] for g, e in zip(generated, expected,
                                                                      strict=True)]
        results.append({"variant": variant, "passed": bool(report), **report.to_dict(),
                        "transformers_greedy_identical": same,
                        "minutes": round((time.monotonic() - started) / 60, 2)})
        print(json.dumps(results[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "smollm2_validate.json",
                      json.dumps({"prompts": PROMPTS, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
