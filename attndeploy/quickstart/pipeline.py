"""The whole pipeline on a built-in task: train -> export -> validate -> package -> serve ->
load test -> one text request per variant -> one report (`<workdir>/report.md` + `report.json`
+ pictures).

Reuses what a previous run left in the work directory: a checkpoint that loads is not trained
again, and an ONNX file exported from the same weights is not exported again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.errors import AttnDeployError
from attndeploy.quickstart.options import QuickstartOptions
from attndeploy.quickstart.targets import target_notes, training_summary
from attndeploy.variants.registry import variant_names

VARIANTS = variant_names()  # every registered variant, in order


@dataclass
class VariantOutcome:
    variant: str
    checkpoint: Path
    onnx: Path
    reused_checkpoint: bool = False
    reused_export: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)  # targets.training_summary
    train_seconds: float | None = None
    export_seconds: float | None = None
    validation: dict[str, Any] = field(default_factory=dict)
    validation_files: dict[str, str] = field(default_factory=dict)
    served_model: str | None = None
    text_model: str | None = None
    text_example: dict[str, Any] = field(default_factory=dict)
    loadtest: dict[str, Any] = field(default_factory=dict)
    loadtest_files: dict[str, str] = field(default_factory=dict)


Log = Callable[[str], None]


def train_or_reuse(variant: str, ckpt_dir: Path, options: QuickstartOptions, log: Log = print,
                   progress: bool = False) -> tuple[dict[str, Any], bool, float | None]:
    """The quickstart's model of `variant` trained on `options.task` into `ckpt_dir`, or the
    checkpoint already there if it loads: (its metrics, whether it was reused, training seconds
    or None when reused)."""
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.config import ModelConfig
    from attndeploy.train import (
        DEFAULT_DENSITY_TARGET,
        TrainConfig,
        load_training_data,
        train_checkpoint,
    )

    if (ckpt_dir / "config.json").is_file():
        try:
            ckpt = read_checkpoint(ckpt_dir)
            log(f"{variant}: reusing checkpoint {ckpt_dir}")
            return ckpt.metadata.get("metrics", {}), True, None
        except AttnDeployError as exc:
            log(f"{variant}: retraining: the existing checkpoint does not load ({exc})")
    data = load_training_data(task=options.task, seed=options.seed, max_seq=64)
    config = ModelConfig(
        vocab_size=len(data.tokenizer), num_labels=len(data.label_names), variant=variant,
        head=data.head, max_seq=64,
    )
    # A gated variant is steered to `train --dataset`'s density target, which the report states
    # and checks; the others ignore it.
    train_config = TrainConfig(steps=options.steps, seed=options.seed,
                               max_seconds=options.max_train_seconds or None,
                               density_target=DEFAULT_DENSITY_TARGET)
    result = train_checkpoint(config, data, train_config, ckpt_dir, force=True, progress=progress)
    return result.metrics, False, result.summary["seconds"]


def export_or_reuse(variant: str, ckpt_dir: Path, onnx_path: Path, log: Log = print
                    ) -> tuple[bool, float | None]:
    """`ckpt_dir` exported to `onnx_path`, unless the file there already holds these weights:
    (whether it was reused, export seconds or None when reused)."""
    from attndeploy.export.exporter import export_checkpoint, read_metadata
    from attndeploy.fsutil import file_sha256

    if onnx_path.is_file():
        try:
            same = read_metadata(onnx_path).get("weights_sha256") == file_sha256(
                ckpt_dir / "model.safetensors")
        except Exception:  # an unreadable file is simply exported again
            same = False
        if same:
            log(f"{variant}: reusing {onnx_path}")
            return True, None
    result = export_checkpoint(ckpt_dir, onnx_path)
    log(f"{variant}: exported {onnx_path} in {result.seconds:.1f} s "
        f"({', '.join(f'{n}x {op}' for op, n in result.custom_nodes.items()) or 'no custom ops'})")
    return False, result.seconds


def run_quickstart(options: QuickstartOptions, *, log: Log = print, progress: bool = True
                   ) -> dict[str, Any]:
    """Run every stage; returns the report data (also written to `<workdir>/report.json`)."""
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.validate.validator import validate_model

    started = time.perf_counter()
    work = Path(options.workdir)
    outcomes: list[VariantOutcome] = []
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    for variant in VARIANTS if options.variants is None else options.variants:
        outcome = VariantOutcome(variant, work / "checkpoints" / variant,
                                 work / "onnx" / f"{variant}.onnx")
        outcome.metrics, outcome.reused_checkpoint, outcome.train_seconds = train_or_reuse(
            variant, outcome.checkpoint, options, log, progress)
        outcome.training = training_summary(read_checkpoint(outcome.checkpoint))
        for note in target_notes(outcome.metrics, outcome.training):
            log(f"{variant}: {note}")
        outcomes.append(outcome)
    timings["train"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    for outcome in outcomes:
        outcome.reused_export, outcome.export_seconds = export_or_reuse(
            outcome.variant, outcome.checkpoint, outcome.onnx, log)
    timings["export"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    for outcome in outcomes:
        report = validate_model(outcome.checkpoint, outcome.onnx)
        files = report.write(work / "validation", stem=outcome.variant)
        outcome.validation = report.to_json()
        outcome.validation_files = {k: str(v) for k, v in files.items()}
        log(f"{outcome.variant}: validation {'passed' if report.passed else 'FAILED'}")
    timings["validate"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    _package(outcomes, options, log)
    timings["package"] = time.perf_counter() - t0

    if options.serve:
        t0 = time.perf_counter()
        _serve_and_load(outcomes, options, log, progress)
        timings["serve_and_loadtest"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    from attndeploy.quickstart.report import write_report

    data = {
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
        "variants": [_outcome_json(o) for o in outcomes],
        "timings_s": timings,
    }
    paths = write_report(data, outcomes, work, options)
    timings["report"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - started
    data["timings_s"] = {k: round(v, 2) for k, v in timings.items()}
    data["files"] = {k: str(v) for k, v in paths.items()}
    from attndeploy.fsutil import atomic_write_text

    atomic_write_text(work / "report.json", json.dumps(data, indent=2, default=str) + "\n")
    data["passed"] = all(o.validation.get("passed") for o in outcomes) and all(
        o.loadtest.get("passed", True) for o in outcomes)
    return data


def _outcome_json(outcome: VariantOutcome) -> dict[str, Any]:
    return {
        "variant": outcome.variant,
        "checkpoint": str(outcome.checkpoint),
        "onnx": str(outcome.onnx),
        "reused_checkpoint": outcome.reused_checkpoint,
        "reused_export": outcome.reused_export,
        "metrics": outcome.metrics,
        "training": outcome.training,
        "notes": target_notes(outcome.metrics, outcome.training),
        "train_seconds": outcome.train_seconds,
        "export_seconds": outcome.export_seconds,
        "validation_passed": outcome.validation.get("passed"),
        "validation_files": outcome.validation_files,
        "served_model": outcome.served_model,
        "text_model": outcome.text_model,
        "text_example": outcome.text_example,
        "loadtest_passed": outcome.loadtest.get("passed"),
        "loadtest_files": outcome.loadtest_files,
    }


def _package(outcomes: list[VariantOutcome], options: QuickstartOptions, log: Log) -> None:
    from attndeploy.serving.packaging.check_repo import check_repository
    from attndeploy.serving.packaging.options import PackageOptions
    from attndeploy.serving.packaging.repository import package_model

    for outcome in outcomes:
        written = package_model(
            outcome.onnx, options.repo,
            PackageOptions(flavor="both", name=outcome.variant, force=True),
        )
        for model in written:
            if model.is_text:
                outcome.text_model = model.name
            elif model.to_dict()["flavor"] == "python":
                outcome.served_model = model.name
        log(f"{outcome.variant}: packaged {', '.join(m.name for m in written)}")
    report = check_repository(options.repo)
    log(f"check-repo: {report.summary()}")
    report.raise_for_errors()


def _serve_and_load(outcomes: list[VariantOutcome], options: QuickstartOptions, log: Log,
                    progress: bool) -> None:
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test
    from attndeploy.serving.server import TritonServer, free_ports

    grpc, http, metrics = options.ports or free_ports(3)
    models = [o.served_model for o in outcomes if o.served_model]
    models += [o.text_model for o in outcomes if o.text_model]
    work = Path(options.workdir)
    server = TritonServer(options.repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                          host=options.host, log_file=work / "tritonserver.log", models=models)
    log(f"starting tritonserver ({len(models)} models) on {options.host}:{grpc}")
    with server:
        for outcome in outcomes:
            config = LoadTestConfig(
                model=outcome.served_model, url=server.grpc_url,
                concurrency=options.concurrency, seq_lengths=(32,),
                window_s=options.load_window_s, max_windows=options.load_max_windows,
                stable_windows=3, warmup_requests=20, check_fraction=0.05,
                onnx_path=outcome.onnx, seed=options.seed,
            )
            report = run_load_test(config, progress=progress)
            files = report.write_all(work / "loadtest", stem=outcome.variant)
            outcome.loadtest = report.to_dict()
            outcome.loadtest_files = {k: str(v) for k, v in files.items()}
            log(f"{outcome.variant}: load test {'passed' if report.passed else 'FAILED'}")
            if outcome.text_model:
                outcome.text_example = text_request(server.http_url, outcome.text_model,
                                                    _example_text(options))
                log(f"{outcome.variant}: {outcome.text_model} answered "
                    f"{outcome.text_example['label']!r}")
    log("stopped tritonserver")


def _example_text(options: QuickstartOptions) -> str:
    from attndeploy.data import example_texts

    (text,) = example_texts(options.task, 1, seed=options.seed + 11)
    return text


def text_request(http_url: str, model: str, text: str, timeout_s: float = 30.0
                 ) -> dict[str, Any]:
    """One KServe v2 JSON request to a text model over HTTP, as `curl` sends it: the path, the
    request body and the response body, both parsed, plus the label for the log."""
    import urllib.request

    path = f"/v2/models/{model}/infer"
    body = {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}
    request = urllib.request.Request(f"http://{http_url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        response = json.load(answer)
    outputs = {o["name"]: o["data"] for o in response.get("outputs", [])}
    label = outputs.get("label", [None])[0]
    return {"path": path, "request": body, "response": response, "label": label}
