"""A fine-tuned MiniLM served as text, fp32 and int8, under the local Triton server at
concurrency 16, against in-process onnxruntime at the batch sizes the server formed.

    .venv/bin/python benchmarks/served_int8.py --checkpoint CKPT --data FILE [--rounds 2]

The checkpoint (a `train --hf-model` one) is exported, quantized (`attndeploy quantize`,
dynamic, per channel, `--exclude-worst 1` by default) and packaged twice into one repository,
python flavour with text models
(`minilm_fp32_text`, `minilm_int8_text`; `package` defaults otherwise). One `tritonserver` serves
both. Each round load-tests both text models in a random order at `--concurrency` (closed loop,
one real text per request: the held-out texts of FILE, split seed 0, 20 %), then runs
in-process onnxruntime (`InferenceModel.predict`: tokenizing and decoding included, as the text
model does) at the average batch size the server formed, for as long. Reports throughput
(texts/s), p50/p95, the server's batch sizes, int8 over fp32 and served over in-process, the
load average. Writes `served_int8.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_speed import held_out_file  # noqa: E402

from attndeploy.fsutil import atomic_write_text  # noqa: E402


def main() -> None:
    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.quantize import QuantizeOptions, quantize_model
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from attndeploy.serving.server import TritonServer, free_ports
    from attndeploy.serving.tune.in_process import measure_in_process

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--exclude-worst", type=int, default=1,
                        help="quantize --exclude-worst (1 keeps MiniLM's labels at 99 %%)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="attndeploy-served-int8-"))
    texts_file = held_out_file(args.data, work / "held_out.jsonl", 128)
    lines = work / "texts.txt"
    lines.write_text("".join(json.loads(row)["text"] + "\n"
                             for row in texts_file.read_text().splitlines()))
    fp32 = work / "minilm_fp32.onnx"
    export_checkpoint(args.checkpoint, fp32)
    int8 = work / "minilm_int8.onnx"
    quantized = quantize_model(fp32, int8, QuantizeOptions(exclude_worst=args.exclude_worst),
                              data=texts_file)
    quantized.raise_for_failure()
    repo = work / "repo"
    for path in (fp32, int8):
        package_model(path, repo, PackageOptions(name=path.stem))
    models = {"fp32": ("minilm_fp32_text", fp32), "int8": ("minilm_int8_text", int8)}
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {name: [] for name in models}
    grpc, http, metrics = free_ports()
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=work / "server.log") as server:
        for _ in range(args.rounds):
            for name in random.sample(list(models), len(models)):
                text_model, onnx_path = models[name]
                report = run_load_test(LoadTestConfig(
                    model=text_model, url=server.grpc_url, concurrency=(args.concurrency,),
                    text_file=lines, onnx_path=onnx_path, window_s=args.window, max_windows=6,
                    check_fraction=0.0), progress=False).to_dict()
                level = report["levels"][0]
                batch = max(1, round(level["server"].get("avg_batch_size") or 1))
                local = measure_in_process(onnx_path, text=True, batch_size=batch, seq=32,
                                           threads=1, workers=1, seconds=args.window * 2,
                                           text_file=lines)
                runs[name].append({
                    "throughput": level["throughput_infer_per_s"],
                    "p50_ms": level["latency_ms"]["p50"], "p95_ms": level["latency_ms"]["p95"],
                    "avg_batch_size": level["server"].get("avg_batch_size"),
                    "in_process_throughput": local.throughput, "in_process_batch": batch,
                })
    summary = {}
    for name, entries in runs.items():
        served = statistics.median(e["throughput"] for e in entries)
        local = statistics.median(e["in_process_throughput"] for e in entries)
        summary[name] = {"served_texts_per_s": served, "in_process_texts_per_s": local,
                         "served_over_in_process": served / local,
                         "p95_ms": statistics.median(e["p95_ms"] for e in entries)}
    summary["int8_over_fp32_served"] = (summary["int8"]["served_texts_per_s"]
                                        / summary["fp32"]["served_texts_per_s"])
    report = {"benchmark": "served_int8", "checkpoint": str(args.checkpoint),
              "concurrency": args.concurrency, "rounds": args.rounds,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "quantize": quantized.to_dict(), "runs": runs, "summary": summary}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "served_int8.json", json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
