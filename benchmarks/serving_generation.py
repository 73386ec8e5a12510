"""Continuous batching on the real tritonserver (issue #50, "Batching"): aggregate output
tokens/s of a generate model at 1 stream and at 8 concurrent streams.

The model is any exported decoder (`--model PATH.onnx`: our own trained LM, or the SmolLM2
export), packaged here as `<name>_generate` (`package_model`, `--max-running` sequences at
once, `--threads` onnxruntime threads) and served by `TritonServer` (the request guard in front,
as `attndeploy serve` runs it). Without `--model`, `--make-model` exports a randomly initialised
standard decoder of `--d-model`/`--layers`/`--vocab` (an untrained one rarely ends at `<eos>`,
so every request runs its full `--new-tokens`; the speed of a graph does not depend on its
weights).

Each round measures, interleaved: 1 stream sending `--requests-one` requests one after the
other, then 8 streams (threads) each sending `--requests-per-stream` requests, all greedy over
gRPC streaming (`client.generate.grpc_generate`), prompts of `--prompt-words` words. Aggregate
tokens/s = tokens received / wall time of the level. Reported: each round's and the median
ratio (target: 8 streams >= 2.5x one stream), TTFT and inter-token medians, and whether a sample
of served greedy tokens equals in-process `generate`.

Run: `.venv/bin/python benchmarks/serving_generation.py [--model PATH.onnx | --make-model]
[--new-tokens 64] [--rounds 3] [--threads 2] [--max-running 8] [--out DIR]`;
writes DIR/serving_generation.json (DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.generation.loop import DecoderModel  # noqa: E402
from attndeploy.serving.client.generate import GenerateParams, grpc_generate  # noqa: E402
from attndeploy.serving.packaging.repository import PackageOptions, package_model  # noqa: E402
from attndeploy.serving.server import TritonServer, free_ports  # noqa: E402


def make_model(folder: Path, args: argparse.Namespace) -> Path:
    """A randomly initialised standard decoder with a word vocabulary, exported."""
    import torch

    from attndeploy.export.decoder import export_decoder
    from attndeploy.generation.tokenizer import LMTokenizer
    from attndeploy.models.decoder.config import DecoderConfig
    from attndeploy.models.decoder.model import CausalLM

    words = [f"w{i}" for i in range(args.vocab - 4)]
    tokenizer = LMTokenizer.build([" ".join(words)], max_vocab=args.vocab)
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=len(tokenizer), d_model=args.d_model,
                           n_heads=args.heads, n_layers=args.layers, d_ff=4 * args.d_model,
                           max_seq=args.max_seq)
    path = folder / "bench_lm.onnx"
    export_decoder(CausalLM(config).eval(), tokenizer, path)
    return path


# Words for a model whose tokenizer has no word list (a converted model's BPE)
ENGLISH = ("the", "a", "river", "house", "city", "old", "new", "green", "walks", "reads",
           "near", "under", "light", "morning", "friend", "story", "quiet", "market", "road",
           "small", "garden", "writes", "window", "evening", "music", "train", "stone")


def prompts(model: DecoderModel, count: int, words: int, seed: int) -> list[str]:
    word_list = getattr(model.tokenizer, "vocab", None)
    vocab = ([w for w in word_list[4:] if w.isalnum()] if word_list is not None
             else list(ENGLISH))
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(vocab, size=words)) for _ in range(count)]


def level(url: str, model: str, jobs: list[str], streams: int, new_tokens: int) -> dict:
    params = GenerateParams(max_tokens=new_tokens)
    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(lambda p: grpc_generate(url, model, p, params), jobs))
    wall = time.perf_counter() - started
    tokens = sum(len(r.token_ids) for r in results)
    gaps = [g for r in results for g in r.inter_token_s]
    return {"streams": streams, "requests": len(jobs), "tokens": tokens,
            "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 2),
            "ttft_ms_median": round(1000 * statistics.median(r.ttft_s for r in results), 2),
            "inter_token_ms_median": round(1000 * statistics.median(gaps), 3) if gaps else None,
            "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--make-model", action="store_true")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--max-seq", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=16)
    parser.add_argument("--requests-one", type=int, default=4)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-running", type=int, default=8)
    parser.add_argument("--no-guard", action="store_true",
                        help="Serve without the request guard (one hop less per response).")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    if (args.model is None) == (not args.make_model):
        parser.error("give --model PATH.onnx or --make-model")

    with tempfile.TemporaryDirectory(prefix="serving-generation-") as tmp:
        root = Path(tmp)
        path = args.model if args.model is not None else make_model(root, args)
        in_process = DecoderModel(path, threads=args.threads)
        package_model(path, root / "repo", PackageOptions(
            name="bench", threads=args.threads, max_batch_size=args.max_running))
        grpc, http, metrics = free_ports()
        with TritonServer(root / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                          log_file=root / "server.log", guard=not args.no_guard) as server:
            url = f"127.0.0.1:{server.grpc_port}"
            texts = prompts(in_process, 64, args.prompt_words, seed=1)
            level(url, "bench_generate", texts[:2], 2, 4)  # warm-up
            rounds = []
            for index in range(args.rounds):
                one = level(url, "bench_generate", texts[:args.requests_one], 1,
                            args.new_tokens)
                eight = level(url, "bench_generate",
                              texts[:8 * args.requests_per_stream], 8, args.new_tokens)
                checked = [(p, r) for p, r in zip(texts, eight["results"], strict=False)][:3]
                same = all(r.token_ids == in_process.generate(p, args.new_tokens)[0].token_ids
                           for p, r in checked)
                for entry in (one, eight):
                    entry.pop("results")
                ratio = eight["tokens_per_s"] / one["tokens_per_s"]
                rounds.append({"one_stream": one, "eight_streams": eight,
                               "ratio": round(ratio, 2), "greedy_equal_in_process": same})
                print(f"round {index + 1}: 1 stream {one['tokens_per_s']:.1f} tok/s, "
                      f"8 streams {eight['tokens_per_s']:.1f} tok/s, ratio {ratio:.2f}, "
                      f"greedy equal: {same}", flush=True)
    ratios = [r["ratio"] for r in rounds]
    document = {
        "benchmark": "serving_generation",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "model": str(args.model) if args.model else {
            "made": "random standard decoder", "d_model": args.d_model, "heads": args.heads,
            "layers": args.layers, "vocab": args.vocab, "max_seq": args.max_seq},
        "settings": {k: v for k, v in vars(args).items() if k not in ("model", "out")},
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
        "target_ratio": 2.5,
        "target_met": statistics.median(ratios) >= 2.5,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "serving_generation.json", json.dumps(document, indent=2) + "\n")
    print(json.dumps({k: document[k] for k in ("median_ratio", "target_met")}))


if __name__ == "__main__":
    main()
