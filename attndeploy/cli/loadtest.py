"""`attndeploy loadtest`: a gRPC or HTTP load test of a served model (perf_analyzer conventions)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.output import console, print_json
from attndeploy.serving.protocol import Protocol


class Distribution(str, Enum):
    constant = "constant"
    poisson = "poisson"


def command(
    model: Annotated[str, typer.Option(help="Served model name (an id model or NAME_text).")],
    protocol: Annotated[Protocol, typer.Option(help="gRPC or HTTP (KServe v2).")] = Protocol.GRPC,
    url: Annotated[
        str | None,
        typer.Option(help="Server address host:port [default: 127.0.0.1:8001 for grpc, "
                          "127.0.0.1:8000 for http]."),
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Concurrency levels, e.g. 1,4,16 (closed loop).")
    ] = None,
    request_rate: Annotated[
        str | None, typer.Option(help="Request rates per second, e.g. 50,100 (open loop).")
    ] = None,
    distribution: Annotated[
        Distribution, typer.Option(help="Arrivals in request-rate mode.")
    ] = Distribution.constant,
    batch: Annotated[int, typer.Option(help="Rows per request.")] = 1,
    seq: Annotated[
        str, typer.Option(help="Sequence length, or a mix: 16,32,64 (tokens, or words of a "
                               "text model's random texts).")
    ] = "32",
    text_file: Annotated[
        Path | None,
        typer.Option(help="Send these texts (non-blank lines, --batch per request) instead of "
                          "random ones; an id model gets them tokenized with its vocabulary."),
    ] = None,
    window: Annotated[float, typer.Option(help="Measurement window (s).")] = 5.0,
    stability: Annotated[float, typer.Option(help="Stability threshold (0.10 = 10 %).")] = 0.10,
    max_windows: Annotated[int, typer.Option(help="Windows per level at most.")] = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up requests per level (not counted).")] = 20,
    check_fraction: Annotated[
        float, typer.Option(help="Share of responses checked against in-process onnxruntime.")
    ] = 0.02,
    repo: Annotated[
        Path, typer.Option(help="Repository holding the model (its model.onnx is the oracle).")
    ] = Path("model_repository"),
    onnx: Annotated[Path | None, typer.Option(help="ONNX file for the checks.")] = None,
    seed: Annotated[int, typer.Option(help="Random seed of the inputs.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report here ('-' = stdout).")
    ] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write a CSV here.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Write a PNG here.")] = None,
) -> None:
    """Run concurrency or request-rate levels; report throughput, latency and server split.

    If the server dies (or the test stops otherwise) part-way, --json still receives what was
    measured, marked "partial": true with the reason, and the command exits 1.
    """
    from attndeploy.fsutil import check_output_file
    from attndeploy.serving.launch import find_model_onnx
    from attndeploy.serving.loadtest import LoadTestConfig, parse_number_list, run_load_test

    config = LoadTestConfig(
        model=model, url=url, protocol=protocol.value, text_file=text_file,
        concurrency=parse_number_list(concurrency, "concurrency") if concurrency else (),
        request_rates=parse_number_list(request_rate, "request rate", float)
        if request_rate else (),
        distribution=distribution.value, batch=batch,
        seq_lengths=parse_number_list(seq, "seq"), window_s=window,
        stability_threshold=stability, max_windows=max_windows, warmup_requests=warmup,
        check_fraction=check_fraction,
        onnx_path=onnx or (find_model_onnx(repo, model) if repo.is_dir() else None), seed=seed,
    )
    to_stdout = json_path is not None and str(json_path) == "-"
    # Outputs are checked before the load test, not found unwritable after minutes of it.
    for path in (None if to_stdout else json_path, csv_path, plot_path):
        if path is not None:
            check_output_file(path)

    def write_partial(report) -> None:
        if to_stdout:
            print_json(report.to_dict())
        elif json_path is not None:
            report.write_json(json_path)

    report = run_load_test(config, progress=not to_stdout,
                           on_partial=write_partial if json_path is not None else None)
    if json_path is not None and not to_stdout:
        report.write_json(json_path)
    if csv_path is not None:
        report.write_csv(csv_path)
    if plot_path is not None:
        report.write_plot(plot_path)
    if to_stdout:
        print_json(report.to_dict())
    else:
        _print_table(report)
    report.raise_if_failed()


def _print_table(report) -> None:
    from rich.table import Table

    data = report.to_dict()
    table = Table(title=f"load test of {data['model']} (latency in ms)")
    for column in ("level", "infer/s", "p50", "p95", "p99", "errors", "batch", "stable"):
        table.add_column(column, justify="right")

    def fmt(value, spec=".1f"):
        return "-" if value is None else format(value, spec)

    for level in data["levels"]:
        lat, server = level["latency_ms"], level["server"]
        table.add_row(level["label"], fmt(level["throughput_infer_per_s"]), fmt(lat["p50"], ".2f"),
                      fmt(lat["p95"], ".2f"), fmt(lat["p99"], ".2f"), str(level["error_count"]),
                      fmt(server.get("avg_batch_size"), ".2f"), "yes" if level["stable"] else "no")
    console.print(table)
