"""The parity report as Markdown: `render_markdown(report)` (`ValidationReport.to_markdown`).

It reads the report as a `results.ReportView`: the report calls this module, not the other way
round."""

from __future__ import annotations

from attndeploy.validate.results import ReportView


def render_markdown(report: ReportView) -> str:
    """The report for people: verdict, oracles with per-output statistics, gates, padding,
    failures, timings, notes and environment."""
    m = report.model
    verdict = "PASSED" if report.passed else "FAILED"
    lines = [
        f"# Parity validation: {verdict}",
        "",
        f"- ONNX file: `{m.get('onnx_path')}`",
        f"- checkpoint: `{m.get('checkpoint')}` (weights sha256 `{m.get('weights_sha256')}`)",
        f"- model: {m.get('family')} / {m.get('variant')} / {m.get('head')}, "
        f"{m.get('dtype')}, opset {m.get('opset')}, max seq {m.get('max_seq')}",
        f"- reference: PyTorch eager (fp32); tolerance atol {report.tolerance.atol:g}, "
        f"rtol {report.tolerance.rtol:g} (an element fails only if |a-b| > atol and "
        "|a-b| > rtol·|b|)",
    ]
    for name, tol in report.per_output.items():
        lines.append(f"- `{name}`: atol {tol.atol:g}, rtol {tol.rtol:g}")
    lines.append(
        "- shapes: " + ", ".join(f"{s} (lengths {list(lengths)})" for s, lengths in report.shapes)
    )
    lines += ["", "## Oracles", "",
              "| oracle | status | shapes | seconds |", "|---|---|---|---|"]
    for o in report.oracles.values():
        shapes = ", ".join(str(r.shape) for r in o.results) or "-"
        lines.append(f"| {o.name} | {o.status} | {shapes} | {o.seconds:.2f} |")
    for o in report.oracles.values():
        lines += ["", f"### {o.name}: {o.status}"]
        if o.note:
            lines.append(f"_{o.note}_")
        if o.message:
            lines += ["", f"> {o.message}"]
        rows = [r for r in o.results if r.result is not None]
        if not rows:
            continue
        lines += [
            "",
            "| shape | output | passed | max abs | p99 abs | max rel | cosine | min atol "
            "| argmax agree | failing |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            for name, out in (r.result.outputs if r.result else {}).items():
                if out.kind == "gates":
                    lines.append(
                        f"| {r.shape} | {name} | {_yes(out.passed)} | flips {out.flips} "
                        f"| | | | margin {_num(out.margin)} | | {out.failing} |"
                    )
                else:
                    lines.append(
                        f"| {r.shape} | {name} | {_yes(out.passed)} | {_num(out.max_abs)} "
                        f"| {_num(out.p99_abs)} | {_num(out.max_rel)} | {_num(out.cosine, 8)} "
                        f"| {_num(out.min_atol)} | {_num(out.argmax_agreement)} "
                        f"| {out.failing} |"
                    )
    gates = report.gate_summary()
    if gates is not None:
        lines += [
            "", "## GA-Net gates", "",
            f"- flips: {gates['flips']} ({gates['accepted_flips']} accepted with "
            f"|gate logit| < {gates['flip_tolerance']:g}, {gates['refused_flips']} refused)",
            f"- margin (smallest |gate logit| on real tokens): {_num(gates['margin'])}",
            f"- smallest |gate logit| among flips: {_num(gates['flip_margin'])}",
        ]
    if report.padding is not None:
        lines += ["", f"## Padding invariance ({report.padding_runner}): "
                  f"{'passed' if report.padding_passed else 'FAILED'}", ""]
        for case in report.padding:
            worst = max((o.max_abs or 0.0 for o in case.result.outputs.values()
                         if o.kind == "float"), default=0.0)
            lines.append(f"- {case.shape} + {case.extra} padding columns: "
                         f"{'passed' if case.passed else 'FAILED'} (max abs {worst:.3g})")
    failures = report.failures()
    lines += ["", "## Failures", ""]
    if failures:
        for f in failures:
            where = ", ".join(
                f"{k} `{f[k]}`" for k in ("oracle", "shape", "output") if f[k] is not None
            )
            lines.append(f"- {f['check']}: {where}: {f['message']}")
    else:
        lines.append("none")
    t = report.timings
    lines += ["", "## Timings", "",
              f"- total {t.get('total_s', 0):.2f} s (load {t.get('load_s', 0):.2f} s, "
              f"PyTorch reference {t.get('reference_s', 0):.2f} s, "
              f"padding check {t.get('padding_s', 0):.2f} s)"]
    for name, seconds in t.get("oracles", {}).items():
        lines.append(f"- {name}: {seconds:.2f} s")
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report.notes]
    env = report.environment
    lines += ["", "## Environment", "",
              ", ".join(f"{k} {env[k]}" for k in ("python", "attndeploy", "torch", "onnx",
                                                 "onnxruntime", "numpy") if k in env),
              f"platform {env.get('platform')}, {env.get('cpu_count')} CPUs", ""]
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}"
