"""`attndeploy info`: print a checkpoint's configuration and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attndeploy.cli.options import CheckpointArg, JsonFlag
from attndeploy.cli.output import console, named_lines, print_json


def command(checkpoint: CheckpointArg, json_output: JsonFlag = False) -> None:
    """Show a checkpoint's model configuration, labels, training summary and metrics."""
    from attndeploy.checkpoint import read_checkpoint
    from attndeploy.models import count_parameters
    from attndeploy.training.baseline import baseline_verdict, probe_verdict

    check_is_a_directory(checkpoint, "info")
    from attndeploy.cli.family_hooks import checks_hook, describe_export, print_summary

    exported = None if (checkpoint / "config.json").is_file() else describe_export(checkpoint)
    if exported is not None:  # an export folder a family describes (translation's)
        print_summary(exported, json_output)
        return

    describe = checks_hook(checkpoint, "describe_checkpoint")  # a family with its own model
    if describe is not None:
        print_summary(describe(checkpoint), json_output)
        return
    ckpt = read_checkpoint(checkpoint)
    meta = ckpt.metadata
    info = {
        "path": str(ckpt.path),
        "model": meta["model"],
        "labels": list(ckpt.label_names),
        "vocabulary_size": len(ckpt.tokenizer) if ckpt.tokenizer is not None else None,
        "parameters": count_parameters(ckpt.model),
        "data": meta.get("data", {}),
        "training": meta.get("training", {}),
        "metrics": meta.get("metrics", {}),
        "weights_sha256": ckpt.weights_sha256,
    }
    if json_output:
        print_json(info)
        return
    model = meta["model"]
    from attndeploy.families.registry import family_for_head

    console.print(f"[bold]{ckpt.path}[/]: {family_for_head(model['head']).name}, "
                  f"{model['family']} / {model['variant']}, {info['parameters']:,} parameters")
    for key in ("d_model", "n_heads", "n_layers", "d_ff", "max_seq"):
        console.print(f"  {key}: {model[key]}")
    if model["variant"] in model:  # the variant's sub-config (`VariantSpec.config`)
        _print_mapping(model["variant"], model[model["variant"]])
    console.print(f"  labels: {', '.join(ckpt.label_names)}")
    _print_mapping("data", info["data"])
    for key, value in info["metrics"].items():
        console.print(f"  metric {key}: {value:.4f}" if isinstance(value, float)
                      else f"  metric {key}: {value}")
    verdict = baseline_verdict(info["metrics"])
    if verdict:
        style = "green" if info["metrics"].get("beats_baseline") else "bold yellow"
        console.print(f"  [{style}]{verdict}[/]")
    print_probe_verdict(probe_verdict(info["metrics"]))
    console.print(f"  weights sha256: {ckpt.weights_sha256}")


def print_probe_verdict(verdict: str | None) -> None:
    """A pretrained fine-tune's line on its linear probe (`training.baseline.probe_verdict`)."""
    if verdict:
        style = "bold yellow" if verdict.startswith("WARNING") else "green"
        console.print(f"  [{style}]{verdict}[/]", highlight=False)


def _print_mapping(name: str, data: Any) -> None:
    """`name:` and the lines of `data` under it (`name: value` when it is not a mapping)."""
    for line in named_lines(name, data, indent="  "):
        console.print(line, highlight=False, markup=False)


def check_is_a_directory(path: Path, command: str) -> None:
    """A file given for the checkpoint is refused saying what `command` reads (and, for an ONNX
    file, which command reads that); a missing path is left to `read_checkpoint`."""
    from attndeploy.errors import CheckpointError

    if not path.exists() or path.is_dir():
        return
    hint = (f"; for an exported ONNX file use `attndeploy inspect {path}`"
            if path.suffix.lower() == ".onnx" else "")
    raise CheckpointError(f"{path} is a file; `attndeploy {command}` reads a checkpoint directory "
                          f"(config.json + model.safetensors){hint}")
