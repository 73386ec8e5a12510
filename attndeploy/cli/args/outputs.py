"""The outputs' options: the checkpoint folder, replacing it, and the report's form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from attndeploy.cli.args.base import OptionGroup
from attndeploy.cli.options import ForceFlag, JsonFlag, shared
from attndeploy.training.config import DEFAULT_CHECKPOINT_DIR


@dataclass(frozen=True)
class Outputs:
    out: Path
    force: bool
    json_output: bool

    def check(self) -> None:
        """Refuse an output in the way (a file, a read-only place, an existing checkpoint
        without --force) before anything is trained."""
        from attndeploy.errors import CheckpointError
        from attndeploy.fsutil import check_output_dir, check_replaceable

        check_output_dir(self.out)
        check_replaceable(self.out, force=self.force, error=CheckpointError)

    def report(self, result: Any) -> None:
        """The trained checkpoint's metrics and training summary, as JSON or as lines."""
        from attndeploy.cli.output import console, print_json, summary_lines

        if self.json_output:
            print_json({"checkpoint": str(self.out), "metrics": result.metrics,
                        "training": result.summary})
            return
        console.print(summary_lines(self.out, result.metrics, result.summary))


class OutputArgs(OptionGroup):
    """Where the checkpoint goes and how the result is reported."""

    @staticmethod
    def options(
        out: Annotated[
            Path, shared("--out", "The checkpoint directory.")
        ] = Path(DEFAULT_CHECKPOINT_DIR),
        force: ForceFlag = False,
        json_output: JsonFlag = False,
    ) -> None:
        """The outputs' options."""

    def parse(self, values: Mapping[str, Any]) -> Outputs:
        return Outputs(**self.values(values))
