"""`attndeploy convert`: a pretrained Hugging Face decoder (a `save_pretrained` folder or a
`.gguf` file; LLaMA family) -> an attndeploy decoder checkpoint with any variant at its warm start
(it computes what the pretrained model did), for `export`, `validate` and `generate` as any
decoder checkpoint (`attndeploy.integrations.hf_decoder`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import ForceFlag, JsonFlag, VariantOption, shared
from attndeploy.cli.output import console, print_json
from attndeploy.config import ModelConfig


def command(
    hf_model: Annotated[Path, shared(
        "--hf-model", "a LLaMA-family decoder (LlamaForCausalLM): a save_pretrained folder or a "
                      ".gguf file.")],
    out: Annotated[Path, shared("--out", "The checkpoint directory to write.")],
    variant: VariantOption = field_default(ModelConfig, "variant"),
    max_seq: Annotated[int | None, shared(
        "--max-seq", "The context the checkpoint keeps [default: the model's, at most 2048].")
    ] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Convert a pretrained decoder into an attndeploy checkpoint (any variant, warm-started)."""
    from attndeploy.cli.family_hooks import print_summary
    from attndeploy.fsutil import check_replaceable
    from attndeploy.integrations.hf_decoder import convert_to_checkpoint

    check_replaceable(out, force=force)  # before the seconds of loading
    with console.status(f"converting {hf_model}", spinner="dots") if not json_output else (
            contextlib.nullcontext()):
        summary = convert_to_checkpoint(hf_model, out, variant=variant, max_seq=max_seq,
                                        force=force)
    if json_output:
        print_json(summary)
    else:
        console.print(f"wrote [bold]{out}[/]")
        print_summary({k: v for k, v in summary.items() if k != "checkpoint"}, False)

