"""The quickstart's `report.md`: tables of every stage, and the pictures people look at."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import torch

from attndeploy.fsutil import atomic_write_text
from attndeploy.quickstart import figures
from attndeploy.quickstart.targets import target_notes
from attndeploy.variants.registry import variant_spec


def _max_logit_error(validation: dict[str, Any], oracle: str) -> float | None:
    results = validation.get("oracles", {}).get(oracle, {}).get("results", [])
    values = [r["outputs"]["logits"]["max_abs"] for r in results
              if "logits" in r.get("outputs", {}) and r["outputs"]["logits"].get("max_abs")
              is not None]
    return max(values) if values else None


def _fmt(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    return format(value, spec) if isinstance(value, float) else str(value)


def _rel(path: Path | str, root: Path) -> str:
    return os.path.relpath(Path(path).resolve(), root.resolve())


def _gate_examples(ckpt_dir: Path, task: str, count: int = 6) -> list:
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.data import example_texts

    ckpt = read_checkpoint(ckpt_dir)
    texts = example_texts(task, count, seed=4242)
    ids, mask = ckpt.tokenizer.encode_batch(texts, max_seq=ckpt.model_config.max_seq)
    with torch.no_grad():
        out = ckpt.model(ids, mask)
    predictions = out["logits"].argmax(-1)
    rows = []
    for row, text in enumerate(texts):
        length = int(mask[row].sum())
        rows.append((text.split()[:length], out["gates"][row, :length].tolist(),
                     ckpt.label_names[int(predictions[row])]))
    return rows


def _layer_maps(ckpt_dir: Path, task: str) -> tuple[list, list[str]]:
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.data import example_texts

    ckpt = read_checkpoint(ckpt_dir)
    (text,) = example_texts(task, 1, seed=777)
    ids, mask = ckpt.tokenizer.encode_batch([text], max_seq=ckpt.model_config.max_seq)
    return figures.evolving_attention_maps(ckpt.model, ids, mask), ckpt.tokenizer.tokenize(text)


def write_report(data: dict[str, Any], outcomes: list, work: Path, options: Any) -> dict[str, Path]:
    """Write pictures and `report.md` into `work`; return the written files by name."""
    work = Path(work)
    pictures = work / "figures"
    paths: dict[str, Path] = {}
    lines = [
        "# attndeploy quickstart report",
        "",
        f"Generated {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')} on the "
        f"built-in task `{options.task}`: every variant trained, exported to ONNX (one "
        "`attndeploy` node per attention layer), validated against PyTorch, packaged for Triton "
        "(python and onnxruntime flavours), and its python flavour served by a local "
        "`tritonserver` and load-tested over gRPC. The local server has only the python "
        "backend; the onnxruntime flavour runs in NGC's Triton image (`attndeploy deploy "
        "kubernetes`), and `tests/interop` checks its outputs in that image's onnxruntime.",
        "",
        "## Timings",
        "",
        "| stage | seconds |",
        "|---|---|",
        *[f"| {stage} | {seconds:.1f} |" for stage, seconds in data["timings_s"].items()],
        "",
        "## Training (held-out set)",
        "",
        "| variant | accuracy | baseline | gate density | rescues | steps | train s "
        "| checkpoint |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        m, t = o.metrics, o.training
        steps = (f"{t['steps_done']} of {t.get('horizon_steps', t['steps_done'])}"
                 if "steps_done" in t else "–")
        lines.append(
            f"| {o.variant} | {_fmt(m.get('accuracy'), '.4f')} "
            f"| {_fmt(m.get('baseline_accuracy'), '.4f')} | {_fmt(m.get('density'), '.3f')}"
            f" | {_fmt(m.get('rescues'))} | {steps} | "
            f"{'reused' if o.reused_checkpoint else _fmt(o.train_seconds, '.1f')} "
            f"| `{o.checkpoint}` |"
        )
    lines += ["", "Against the quickstart's own targets:", ""]
    lines += [f"- **{o.variant}**: {'; '.join(target_notes(o.metrics, o.training))}."
              for o in outcomes]
    lines += [
        "",
        "## Export and parity",
        "",
        "PyTorch eager is the reference; max |Δ logits| over the shape grid per oracle.",
        "",
        "| variant | export s | validation | onnxruntime (all opt.) | onnxruntime (none) "
        "| ONNX reference | report |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        v = o.validation
        md = o.validation_files.get("markdown") or o.validation_files.get("md", "")
        lines.append(
            f"| {o.variant} | {'reused' if o.reused_export else _fmt(o.export_seconds, '.1f')} "
            f"| {'passed' if v.get('passed') else '**FAILED**'} "
            f"| {_fmt(_max_logit_error(v, 'onnxruntime[all]'))} "
            f"| {_fmt(_max_logit_error(v, 'onnxruntime[none]'))} "
            f"| {_fmt(_max_logit_error(v, 'onnx-reference'))} "
            f"| {f'[{Path(md).name}]({_rel(md, work)})' if md else '–'} |"
        )
    lines.append("")
    for o in outcomes:
        png = o.validation_files.get("png") or o.validation_files.get("histogram")
        if png:
            lines += [f"**{o.variant}** parity errors:", "", f"![{o.variant} parity]"
                      f"({_rel(png, work)})", ""]

    served = [o for o in outcomes if o.loadtest]
    if served:
        curves = {}
        lines += [
            "## Serving (Triton python flavour, gRPC, batch 1, seq 32)",
            "",
            "| model | concurrency | infer/s | p50 ms | p95 ms | p99 ms | errors | avg batch "
            "| checks |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for o in served:
            points = []
            for level in o.loadtest.get("levels", []):
                lat, server = level["latency_ms"], level["server"]
                checks = level.get("checks", {})
                lines.append(
                    f"| {o.served_model} | {level.get('concurrency')} "
                    f"| {_fmt(level['throughput_infer_per_s'], '.0f')} | {_fmt(lat['p50'], '.2f')}"
                    f" | {_fmt(lat['p95'], '.2f')} | {_fmt(lat['p99'], '.2f')} "
                    f"| {level['error_count']} | {_fmt(server.get('avg_batch_size'), '.2f')} "
                    f"| {checks.get('done', 0)} done, {checks.get('failed', 0)} failed |"
                )
                if level.get("concurrency") and level["throughput_infer_per_s"]:
                    points.append({"throughput": level["throughput_infer_per_s"],
                                   "p50_ms": lat["p50"], "p95_ms": lat["p95"],
                                   "concurrency": level["concurrency"]})
            curves[o.variant] = points
        paths["latency_throughput"] = figures.plot_latency_throughput(
            curves, pictures / "latency_throughput.png")
        lines += ["", f"![latency vs throughput]({_rel(paths['latency_throughput'], work)})", ""]

    text_examples = [o for o in outcomes if o.text_example]
    if text_examples:
        lines += ["## Text in, label out (the text models, KServe v2 over HTTP)", "",
                  "Each variant's text model `<variant>_text` tokenizes in the server with the "
                  "checkpoint's tokenizer, calls the id model and decodes into the prediction "
                  "record (docs/prediction-contract.md): `tokens`, `label`, the id model's "
                  "`logits`, their softmax `probabilities`, and GA-Net's `attended`, the tokens "
                  "whose hard gates are open. "
                  "One request and its response per variant, as `curl -d @request.json "
                  "localhost:8000<path>` sends and receives them to a server you start with "
                  "`attndeploy serve --repo` on this repository (the quickstart's own server "
                  "ran on free ports and has stopped):", ""]
        for o in text_examples:
            example = o.text_example
            lines += [f"**{o.variant}**: `POST {example['path']}`", "", "```json",
                      json.dumps(example["request"]), "```", "", "```json",
                      json.dumps(example["response"]), "```", ""]

    for outcome in outcomes:  # the figures each variant's spec asks for
        spec = variant_spec(outcome.variant)
        if "gates" in spec.figures:
            examples = _gate_examples(outcome.checkpoint, options.task)
            paths[f"{spec.name}_gates"] = figures.plot_gates(
                examples, pictures / f"{spec.name}_gates.png",
                title=f"{spec.title} hard gates on held-out examples (highlighted = open)")
            lines += [f"## {spec.title}: which tokens the model attends to", "",
                      "Hard gates decided on the gate logits (s > 0), as exported; the label is "
                      "the model's prediction.", "",
                      f"![{spec.title} gates]({_rel(paths[f'{spec.name}_gates'], work)})", ""]
        if "layer_maps" in spec.figures:
            maps, words = _layer_maps(outcome.checkpoint, options.task)
            paths[f"{spec.name}_maps"] = figures.plot_evolving_maps(
                maps, words, pictures / f"{spec.name}_maps.png",
                title=f"{spec.title}: attention maps layer by layer (one example)")
            lines += [f"## {spec.title} across layers", "",
                      f"{spec.title[:1].upper()}{spec.title[1:]}: {spec.summary}.", "",
                      f"![{spec.title} attention maps]"
                      f"({_rel(paths[f'{spec.name}_maps'], work)})", ""]
    lines += ["## Run data", "", "Everything above in machine-readable form: `report.json`.", ""]
    paths["report"] = work / "report.md"
    atomic_write_text(paths["report"], "\n".join(lines))
    return paths
