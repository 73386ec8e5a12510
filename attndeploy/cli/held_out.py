"""`attndeploy held-out`: write the examples a checkpoint was evaluated on and never trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from attndeploy.cli.options import (
    CheckpointArg,
    ForceFlag,
    JsonFlag,
    readable_text_file,
    shared,
)
from attndeploy.cli.output import console, print_json


def command(
    checkpoint: CheckpointArg,
    out: Annotated[Path, shared("--out", "The JSONL file of {\"text\", \"label\"} objects.")],
    data: Annotated[
        Path | None,
        shared("--data", "The JSONL file the checkpoint trained on, where it is now (default: "
                         "the path it recorded); checked to be the same file.",
               callback=readable_text_file),
    ] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Write the checkpoint's held-out examples (the split train evaluated it on, never trained
    on) as JSONL: the texts to give `quantize --data`, so that an exported or int8 model is
    checked on texts the model did not learn."""
    from rich.markup import escape

    from attndeploy.checkpoint import CONFIG_FILE, WEIGHTS_FILE, read_config
    from attndeploy.cli.info import check_is_a_directory
    from attndeploy.data.held_out import held_out_of
    from attndeploy.fsutil import (
        atomic_write_text,
        check_not_an_input,
        check_output_file,
        check_replaceable,
    )

    check_is_a_directory(checkpoint, "held-out")
    config = read_config(checkpoint)
    recorded = config.get("data", {}).get("data_file")
    check_output_file(out)
    check_not_an_input(out, [checkpoint / CONFIG_FILE, checkpoint / WEIGHTS_FILE,
                             *([Path(data or recorded)] if data or recorded else [])])
    check_replaceable(out, force=force)
    held = held_out_of(config.get("data", {}), max_seq=int(config["model"]["max_seq"]),
                       hf="hf" in config, data_file=data)
    atomic_write_text(out, held.to_jsonl())
    accuracy = config.get("metrics", {}).get("accuracy")
    if json_output:
        print_json({"out": str(out), "examples": len(held.examples), "origin": held.origin,
                    "accuracy": accuracy})
        return
    measured = "" if accuracy is None else f"; the checkpoint's accuracy on them: {accuracy:.4f}"
    console.print(f"wrote [bold]{escape(str(out))}[/]: {len(held.examples)} held-out examples "
                  f"of {escape(held.origin)}{measured}", highlight=False)
