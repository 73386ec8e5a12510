"""`attndeploy tune`: search serving configurations on the local server and write the best one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.cli.defaults import field_default, number_list, parameter_default
from attndeploy.cli.options import (
    ForceFlag,
    JsonFlag,
    JsonOutOption,
    ProtocolOption,
    RepoOption,
    readable_text_file,
    shared,
)
from attndeploy.cli.output import console, print_json, print_warning
from attndeploy.errors import AttnDeployError, LoadTestError
from attndeploy.serving.client.protocol import Protocol
from attndeploy.serving.loadtest.config import parse_number_list
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY
from attndeploy.serving.tune.generate import generate_candidates, tune_generate
from attndeploy.serving.tune.options import TuneOptions


def _default(name: str):
    return field_default(TuneOptions, name)


def _levels(what: str):
    """A callback refusing (exit 2) a list that is not integers >= 1."""
    def check(value: str | None) -> str | None:
        if value is None:
            return None
        try:
            numbers = parse_number_list(value, what)
        except LoadTestError as exc:
            raise typer.BadParameter(str(exc).rstrip(".")) from None
        bad = [n for n in numbers if n < 1]
        if bad:
            raise typer.BadParameter(f"{bad[0]} is not an integer >= 1")
        return value

    return check


def _positive(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} is not > 0")
    return value


def command(
    model: Annotated[str, shared("--model", "The one to tune (a text model with the model "
                                            "that runs its ONNX: itself, or the id model it "
                                            "calls by BLS).")],
    repo: RepoOption = DEFAULT_REPOSITORY,
    latency_budget_ms: Annotated[
        float | None,
        typer.Option(help="p95 latency (ms) the chosen configuration must keep at some "
                          "concurrency level [default: none, the highest throughput].",
                     callback=_positive),
    ] = None,
    concurrency: Annotated[
        str, shared("--concurrency", "Each candidate is measured at each (rising).",
                    callback=_levels("concurrency"))
    ] = number_list(_default("concurrency")),
    budget_minutes: Annotated[
        float, typer.Option(help="Wall time of the whole run, search and references.",
                            callback=_positive)
    ] = _default("budget_minutes"),
    int8: Annotated[
        Path | None,
        typer.Option(help="An int8 ONNX of the same model (e.g. from `attndeploy quantize`), "
                          "tried as another version of the id model."),
    ] = None,
    seq: Annotated[
        str, shared("--seq", callback=_levels("seq"))
    ] = number_list(_default("seq_lengths")),
    text_file: Annotated[
        Path | None, shared("--text-file", "Sent (non-blank lines) instead of random ones.",
                            callback=readable_text_file)
    ] = None,
    protocol: ProtocolOption = Protocol(_default("protocol")),
    window: Annotated[
        float, shared("--window", "(Of each level.)", callback=_positive)
    ] = _default("window_s"),
    finalists: Annotated[
        int, typer.Option(help="The search's best configurations measured again after it; "
                               "the choice is made on these fresh numbers (the best of many "
                               "noisy measurements reads high).", min=1)
    ] = _default("finalists"),
    apply: Annotated[
        bool, typer.Option("--apply", help="Write the chosen configuration into the "
                                           "repository (config.pbtxt replaced atomically, the "
                                           "old one kept as config.pbtxt.previous).")
    ] = False,
    json_output: JsonFlag = False,
    json_out: JsonOutOption = None,
    plot_path: Annotated[
        Path | None, shared("--plot", "The Pareto front of throughput against p95.")
    ] = None,
    force: ForceFlag = False,
    max_running: Annotated[
        str, typer.Option(help="A generate model: the largest running batches tried.",
                          callback=_levels("max running"))
    ] = number_list(parameter_default(generate_candidates, "max_running")),
    ort_threads: Annotated[
        str, typer.Option(help="A generate model: onnxruntime threads tried.",
                          callback=_levels("threads"))
    ] = number_list(parameter_default(generate_candidates, "threads")),
    generate_instances: Annotated[
        str, typer.Option("--generate-instances", help="A generate model: model instances "
                          "tried (each its own batcher).", callback=_levels("instances"))
    ] = number_list(parameter_default(generate_candidates, "instances")),
    requests: Annotated[
        int, shared("--requests", min=1)
    ] = parameter_default(tune_generate, "requests"),
    max_tokens: Annotated[
        int, shared("--max-tokens", "N.", min=1)
    ] = parameter_default(tune_generate, "max_tokens")[0],
) -> None:
    """Measure serving configurations (batch size, queue delay, preferred sizes, instances,
    threads, int8) on the real local server; print the Pareto front of throughput against p95
    and the configuration of highest throughput within the latency budget.

    Each candidate is a scratch copy of the repository served by a fresh tritonserver and load
    tested level by level; a coordinate search (model analyzer's quick search, simplified)
    proposes the next one until nothing improves or the budget is spent. The package default
    and in-process onnxruntime are measured as references; the best --finalists are measured
    again and the choice made among those fresh numbers, and the chosen configuration once more
    (the repeat: is it stable?). Ctrl-C keeps what was measured (--json-out, --json and --plot
    get it, marked partial; exit 130); nothing is applied then, nor when no candidate meets the
    budget.
    """
    from attndeploy.fsutil import check_output_file, check_replaceable
    from attndeploy.output_set import atomic_outputs
    from attndeploy.serving.tune import apply_candidate, run_tune
    from attndeploy.serving.tune.report import write_plot

    if model.endswith("_generate"):
        _tune_generate(repo=repo, model=model, max_running=max_running,
                       ort_threads=ort_threads, generate_instances=generate_instances,
                       concurrency=concurrency, requests=requests,
                       max_tokens=max_tokens, text_file=text_file, protocol=protocol.value,
                       itl_budget_ms=latency_budget_ms, apply=apply, json_output=json_output,
                       json_out=json_out, force=force)
        return

    options = TuneOptions(
        repo=repo, model=model, latency_budget_ms=latency_budget_ms,
        concurrency=parse_number_list(concurrency, "concurrency"),
        budget_minutes=budget_minutes, int8=int8, seq_lengths=parse_number_list(seq, "seq"),
        text_file=text_file, protocol=protocol.value, window_s=window, finalists=finalists,
    )
    for path in (json_out, plot_path):  # unwritable outputs fail now, not after the search
        if path is not None:
            check_output_file(path)
            check_replaceable(path, force=force)

    def write(result: Any) -> None:
        with atomic_outputs(replace=force) as outputs:  # both files or neither
            if json_out is not None:
                result.write_json(outputs.file(json_out))
            if plot_path is not None:
                write_plot(result, outputs.file(plot_path))
        if json_output:
            print_json(result.to_dict())

    def write_partial(result: Any) -> None:
        try:
            write(result)
        except (AttnDeployError, OSError) as exc:  # the interrupt comes next
            print_warning(f"the partial result could not be written: {exc}")

    wants = json_output or json_out is not None or plot_path is not None
    result = run_tune(options, progress=not json_output,
                      on_partial=write_partial if wants else None)
    if apply and result.chosen is not None:
        result = result.with_applied(apply_candidate(result.target, result.chosen.candidate))
    write(result)
    if not json_output:
        _print(result.to_dict(), apply)


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _print(data: dict[str, Any], applied: bool) -> None:
    from rich.table import Table

    budget = data["latency_budget_ms"]
    table = Table(title=f"Pareto front of {data['target']['model']}: throughput against p95"
                        + (f" (budget {budget:g} ms)" if budget is not None else ""))
    for column in ("configuration", "concurrency", "infer/s", "p95 ms", ""):
        table.add_column(column, justify="right")
    chosen = data["chosen"] or {}
    for point in data["pareto"]:
        mark = ("chosen" if point["name"] == chosen.get("name")
                and point["concurrency"] == chosen.get("concurrency") else "")
        if budget is not None and point["p95_ms"] > budget:
            mark = mark or "over budget"
        table.add_row(point["name"], str(point["concurrency"]), _fmt(point["throughput"], ".0f"),
                      _fmt(point["p95_ms"], ".2f"), mark)
    console.print(table)
    measured = [m for m in data["measurements"] if m["role"] not in ("final", "repeat")]
    finals = [m["name"] for m in data["measurements"] if m["role"] == "final"]
    console.print(f"{len(measured)} configuration(s) measured in {data['duration_s'] / 60:.1f} "
                  f"min; search stopped: {data['search']['stopped_because'] or '-'}")
    if finals:
        console.print(f"finalists measured again, the choice made on these: {', '.join(finals)}")
    default = data["package_default"]
    console.print(f"chosen: [bold]{chosen.get('name')}[/] at concurrency "
                  f"{chosen.get('concurrency')}: {_fmt(chosen.get('throughput'), '.0f')} infer/s, "
                  f"p95 {_fmt(chosen.get('p95_ms'), '.2f')} ms (package default: "
                  f"{default['name']})")
    for row in data["versus_default"]:
        console.print(f"  c{row['concurrency']}: {row['throughput_ratio']:.2f}x the package "
                      f"default's throughput, p95 {row['chosen_p95_ms']:.2f} ms vs "
                      f"{row['default_p95_ms']:.2f} ms")
    for row in data["served_vs_in_process"]:
        console.print(f"  c{row['concurrency']}: served {row['ratio']:.2f}x in-process "
                      f"onnxruntime at batch {row['batch_size']} ({row['served']:.0f} vs "
                      f"{row['in_process']:.0f}/s)")
    stability = data["stability"]
    if stability is not None:
        diff = stability["relative_difference"]
        chosen_on = ("its finalist measurement" if stability["chosen_on"] == "final"
                     else "the search's measurement")
        search = stability["search_throughput"]
        during = (f"; the search had measured {search:.0f}" if search is not None
                  and stability["chosen_on"] == "final" else "")
        console.print(f"  repeat: {_fmt(stability['repeat_throughput'], '.0f')} infer/s, "
                      f"{'-' if diff is None else f'{diff:.1%}'} from {chosen_on} "
                      f"({'stable' if stability['stable'] else 'NOT stable'} within "
                      f"{stability['tolerance']:.0%}){during}")
    for note in data["notes"]:
        print_warning(note)
    if data["applied"] is not None and not data["applied"]["configs"]:
        console.print("applied: nothing to write, the repository holds this configuration")
    elif data["applied"] is not None:
        configs = ", ".join(data["applied"]["configs"].values())
        console.print(f"applied: {configs} (the old configs kept as config.pbtxt.previous); "
                      "restart the server to serve it")
    elif not applied:
        console.print("run again with --apply to write it into the repository")


def _tune_generate(*, repo: Path, model: str, max_running: str, ort_threads: str,
                   generate_instances: str, concurrency: str, requests: int,
                   max_tokens: int, text_file: Path | None,
                   protocol: str, itl_budget_ms: float | None, apply: bool, json_output: bool,
                   json_out: Path | None, force: bool) -> None:
    """`tune` of a generate model: MAX_RUNNING x ORT_THREADS, tokens/s within an ITL p95
    budget (`--latency-budget-ms`)."""
    import json

    from attndeploy.fsutil import atomic_write_text, check_output_file, check_replaceable
    from attndeploy.serving.loadtest.generation import DEFAULT_PROMPTS
    from attndeploy.serving.tune.generate import (
        apply_generate,
        generate_candidates,
        tune_generate,
    )

    if json_out is not None:
        check_output_file(json_out)
        check_replaceable(json_out, force=force)
    prompts = DEFAULT_PROMPTS
    if text_file is not None:
        prompts = tuple(line.strip() for line in text_file.read_text(encoding="utf-8")
                        .splitlines() if line.strip())
    candidates = generate_candidates(parse_number_list(max_running, "max running"),
                                     parse_number_list(ort_threads, "threads"),
                                     parse_number_list(generate_instances, "instances"))

    def show(measurement) -> None:
        if json_output:
            return
        best = measurement.best_tokens_per_s(itl_budget_ms)
        console.print(f"max running {measurement.candidate.max_running}, threads "
                      f"{measurement.candidate.threads}, instances "
                      f"{measurement.candidate.instances}: "
                      + ("over the budget or failed" if best is None
                         else f"{best:.1f} tokens/s"))

    result = tune_generate(repo, model, candidates,
                           concurrency=parse_number_list(concurrency, "concurrency"),
                           requests=requests, max_tokens=(max_tokens, max_tokens),
                           prompts=prompts, protocol=protocol, itl_budget_ms=itl_budget_ms,
                           progress=show)
    document = result.to_dict()
    document["applied"] = False
    if apply and result.chosen is not None:
        apply_generate(repo, model, result.chosen)
        document["applied"] = True
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(document, indent=2) + "\n")
    if json_output:
        print_json(document)
    elif result.chosen is None:
        console.print("no candidate kept within the budget")
    else:
        console.print(f"chosen: max running {result.chosen.max_running}, threads "
                      f"{result.chosen.threads}" + (" (applied)" if document["applied"] else ""))
