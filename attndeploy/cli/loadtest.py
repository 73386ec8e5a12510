"""`attndeploy loadtest`: a gRPC or HTTP load test of a served model (perf_analyzer conventions)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.cli.defaults import field_default, number_list
from attndeploy.cli.options import (
    ForceFlag,
    JsonFlag,
    JsonOutOption,
    ProtocolOption,
    UrlOption,
    choices,
    readable_text_file,
    server_url,
    shared,
)
from attndeploy.cli.output import console, print_json, print_warning
from attndeploy.errors import AttnDeployError, LoadTestError
from attndeploy.serving.client.protocol import Protocol
from attndeploy.serving.loadtest.config import (
    DEFAULT_CONCURRENCY,
    LoadTestConfig,
    parse_number_list,
)
from attndeploy.serving.loadtest.generation import GenerateLoadConfig
from attndeploy.serving.loadtest.stats import DISTRIBUTIONS
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY

# The choices of `--distribution`: the load tester's arrival distributions.
Distribution = choices("Distribution", DISTRIBUTIONS)


def _default(name: str):
    return field_default(LoadTestConfig, name)


# A number out of range is a bad option (exit 2), refused before anything runs. The rules are
# LoadTestConfig's (which refuses the same values from Python with a LoadTestError); Typer's
# `min`/`max` take the closed bounds, these callbacks the open ones and the number lists.
def _number(test: Callable[[float], bool], rule: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not test(value):
            raise typer.BadParameter(f"{value:g} is not {rule}")
        return value

    return check


def _numbers(what: str, kind: type, test: Callable[[float], bool], rule: str
             ) -> Callable[[Any], Any]:
    def check(value: str | None) -> str | None:
        if value is None:
            return None
        try:
            values = parse_number_list(value, what, kind)
        except LoadTestError as exc:
            raise typer.BadParameter(str(exc).rstrip(".")) from None
        for number in values:
            if not test(number):
                raise typer.BadParameter(f"{number:g} is not {rule}")
        return value

    return check


def _model_name(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("the model name is empty; give the served model's name")
    return value


def command(
    ctx: typer.Context,
    model: Annotated[str, shared("--model", callback=_model_name)],
    protocol: ProtocolOption = Protocol(_default("protocol")),
    url: UrlOption = None,
    concurrency: Annotated[
        str | None,
        shared("--concurrency", f"[default: {number_list(DEFAULT_CONCURRENCY)} unless "
                                "--request-rate].",
               callback=_numbers("concurrency", int, lambda c: c >= 1,
                                 "a concurrency (an integer >= 1)")),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Request rates per second, e.g. 50,100 (open loop).",
                     callback=_numbers("request rate", float, lambda r: r > 0,
                                       "a request rate (> 0 per second)")),
    ] = None,
    distribution: Annotated[
        Distribution, typer.Option(help="Arrivals in request-rate mode.")
    ] = Distribution(_default("distribution")),
    batch_size: Annotated[
        int, shared("--batch-size", "(Rows per request.)")
    ] = _default("batch"),
    seq: Annotated[
        str, shared("--seq", callback=_numbers("seq", int, lambda n: n >= 1,
                                               "a sequence length (an integer >= 1)"))
    ] = number_list(_default("seq_lengths")),
    text_file: Annotated[
        Path | None,
        shared("--text-file", "Sent (non-blank lines, --batch-size per request) instead of "
                              "random ones; an id model gets them tokenized with its "
                              "vocabulary.", callback=readable_text_file),
    ] = None,
    image_folder: Annotated[
        Path | None,
        typer.Option(help="An image model's images: every PNG and JPEG file below DIR "
                          "(sorted), --batch-size per request [default: random pixels of the "
                          "model's size].")
    ] = None,
    window: Annotated[
        float, shared("--window", callback=_number(lambda w: w > 0, "a window (> 0 seconds)"))
    ] = _default("window_s"),
    stability: Annotated[
        float, typer.Option(help="Stability threshold (0.10 = 10 %).",
                            callback=_number(lambda t: 0 < t < 1, "a threshold in (0, 1)"))
    ] = _default("stability_threshold"),
    max_windows: Annotated[
        int, typer.Option(help="Windows per level at most (at least the stable windows a level "
                               "needs).", min=_default("stable_windows"))
    ] = _default("max_windows"),
    warmup_requests: Annotated[
        int, typer.Option(help="Warm-up requests per level (not counted).", min=0)
    ] = _default("warmup_requests"),
    check_fraction: Annotated[
        float, typer.Option(help="Share of responses checked against in-process onnxruntime.",
                            min=0.0, max=1.0)
    ] = _default("check_fraction"),
    repo: Annotated[
        Path, shared("--repo", "The one holding the model (its model.onnx is the oracle).")
    ] = DEFAULT_REPOSITORY,
    onnx: Annotated[Path | None, typer.Option(help="ONNX file for the checks.")] = None,
    seed: Annotated[int, shared("--seed", "(the inputs)")] = _default("seed"),
    json_output: JsonFlag = False,
    json_out: JsonOutOption = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write a CSV here.")] = None,
    plot_path: Annotated[
        Path | None, shared("--plot", "Latency against throughput.")
    ] = None,
    force: ForceFlag = False,
    max_tokens: Annotated[
        str, shared("--max-tokens", "N or LOW-HIGH (drawn uniformly).")
    ] = "-".join(map(str, field_default(GenerateLoadConfig, "max_tokens"))),
    requests: Annotated[
        int, shared("--requests", min=1)
    ] = field_default(GenerateLoadConfig, "requests_per_level"),
) -> None:
    """Run concurrency or request-rate levels; report throughput, latency and server split.

    --json prints the report as one JSON document on stdout (instead of the table); --json-out
    writes it to a file. If the server dies (or the test stops otherwise, Ctrl-C included)
    part-way, both, --csv and --plot still receive what was measured (the JSON marked
    "partial": true with the reason), and the command exits 1 (130 for Ctrl-C).
    """
    from attndeploy.fsutil import check_output_file, check_replaceable
    from attndeploy.output_set import atomic_outputs
    from attndeploy.serving.loadtest import parse_number_list, run_load_test
    from attndeploy.serving.server.launch import find_model_onnx

    if model.endswith("_generate"):
        from attndeploy.serving.packaging.generate_model import served_generate_source

        _generate_load_test(
            model=model, url=server_url(ctx, url, protocol, repo), protocol=protocol.value,
            concurrency=concurrency, request_rate=request_rate,
            distribution=distribution.value, text_file=text_file, max_tokens=max_tokens,
            requests=requests, check_fraction=check_fraction,
            onnx=onnx or (served_generate_source(repo, model) if repo.is_dir() else None),
            seed=seed, json_output=json_output, json_out=json_out, plot_path=plot_path,
            force=force)
        return

    config = LoadTestConfig(
        model=model, url=server_url(ctx, url, protocol, repo), protocol=protocol.value,
        text_file=text_file, image_folder=image_folder,
        concurrency=parse_number_list(concurrency, "concurrency") if concurrency else (),
        request_rates=parse_number_list(request_rate, "request rate", float)
        if request_rate else (),
        distribution=distribution.value, batch=batch_size,
        seq_lengths=parse_number_list(seq, "seq"), window_s=window,
        stability_threshold=stability, max_windows=max_windows, warmup_requests=warmup_requests,
        check_fraction=check_fraction,
        onnx_path=onnx or (find_model_onnx(repo, model) if repo.is_dir() else None), seed=seed,
    )
    # Outputs are checked before the load test, not found unwritable after minutes of it.
    for path in (json_out, csv_path, plot_path):
        if path is not None:
            check_output_file(path)
            check_replaceable(path, force=force)

    def write_reports(report) -> None:
        with atomic_outputs(replace=force) as outputs:  # every report file or none
            if json_out is not None:
                report.write_json(outputs.file(json_out))
            if csv_path is not None:
                report.write_csv(outputs.file(csv_path))
            if plot_path is not None:
                report.write_plot(outputs.file(plot_path))
        if json_output:
            print_json(report.to_dict())

    def write_partial(report) -> None:
        try:
            write_reports(report)
        except (AttnDeployError, OSError) as exc:  # the error that ended the test comes next
            print_warning(f"the partial report could not be written: {exc}")

    wants_files = json_output or any(p is not None for p in (json_out, csv_path, plot_path))
    report = run_load_test(config, progress=not json_output,
                           on_partial=write_partial if wants_files else None)
    write_reports(report)
    if not json_output:
        _print_table(report)
    report.raise_if_failed()


def _print_table(report) -> None:
    from rich.cells import cell_len
    from rich.markup import escape
    from rich.table import Table

    data = report.to_dict()
    headers = ("level", "infer/s", "p50", "p95", "p99", "errors", "batch", "stable", "checked")

    def fmt(value, spec=".1f"):
        return "-" if value is None else format(value, spec)

    rows = []
    for level in data["levels"]:
        lat, server = level["latency_ms"], level["server"]
        rows.append([level["label"], fmt(level["throughput_infer_per_s"]),
                     fmt(lat["p50"], ".2f"), fmt(lat["p95"], ".2f"), fmt(lat["p99"], ".2f"),
                     str(level["error_count"]), fmt(server.get("avg_batch_size"), ".2f"),
                     "yes" if level["stable"] else "no", _checked(level["checks"])])
    # Each column as wide as its widest cell and no rules, so that nine columns fit 80 cells (a
    # pipe, a small terminal): in a boxed table rich cut "concurrency 16" to "concurrency …".
    table = Table(title=f"load test of {data['model']} (latency in ms)", box=None)
    for index, header in enumerate(headers):
        width = max(cell_len(text) for text in [header, *(row[index] for row in rows)])
        table.add_column(header, justify="right", width=width, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in data["warnings"]:  # what was sent, what was not checked, what is approximate
        console.print(f"  {escape(line)}", style="dim", highlight=False)


def _checked(checks: dict) -> str:
    """The answers compared with in-process onnxruntime that agreed, of those compared."""
    done = checks["done"]
    return "-" if not done else f"{done - checks['failed']}/{done}"


def _token_range(value: str) -> tuple[int, int]:
    low, _, high = value.partition("-")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        raise LoadTestError(f"--max-tokens must be N or LOW-HIGH, got {value!r}") from None
    return bounds


def _generate_load_test(*, model: str, url: str, protocol: str, concurrency: str | None,
                        request_rate: str | None, distribution: str, text_file: Path | None,
                        max_tokens: str, requests: int, check_fraction: float,
                        onnx: Path | None, seed: int, json_output: bool,
                        json_out: Path | None, plot_path: Path | None, force: bool) -> None:
    """`loadtest` of a generate model: TTFT, inter-token latency, tokens/s per level."""
    from attndeploy.fsutil import check_output_file, check_replaceable
    from attndeploy.output_set import atomic_outputs
    from attndeploy.serving.loadtest.generation import (
        DEFAULT_PROMPTS,
        GenerateLoadConfig,
        run_generate_load_test,
    )

    prompts = DEFAULT_PROMPTS
    if text_file is not None:
        prompts = tuple(line.strip() for line in text_file.read_text(encoding="utf-8")
                        .splitlines() if line.strip())
    rates = parse_number_list(request_rate, "request rate", float) if request_rate else ()
    levels = (parse_number_list(concurrency, "concurrency") if concurrency
              else () if rates else (1, 4, 8))
    config = GenerateLoadConfig(
        model=model, url=url, protocol=protocol, concurrency=tuple(levels),
        request_rates=tuple(rates), distribution=distribution, requests_per_level=requests,
        prompts=prompts, max_tokens=_token_range(max_tokens), check_fraction=check_fraction,
        onnx_path=onnx, seed=seed)
    for path in (json_out, plot_path):
        if path is not None:
            check_output_file(path)
            check_replaceable(path, force=force)

    def show(level) -> None:
        if not json_output:
            console.print(
                f"{level.mode} {level.value:g}: {level.tokens_per_s:.1f} tokens/s, "
                f"{level.requests_per_s:.2f} requests/s, TTFT p50/p95/p99 "
                + "/".join(_ms(level.ttft_ms[p]) for p in ("p50", "p95", "p99"))
                + " ms, ITL " + "/".join(_ms(level.itl_ms[p]) for p in ("p50", "p95", "p99"))
                + f" ms, checked {level.checked - level.mismatched}/{level.checked}, "
                f"errors {level.errors}")

    report = run_generate_load_test(config, progress=show)
    with atomic_outputs(replace=force) as outputs:
        if json_out is not None:
            report.write_json(outputs.file(json_out))
        if plot_path is not None:
            report.write_plot(outputs.file(plot_path))
    if json_output:
        print_json(report.to_dict())
    report.raise_if_failed()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
