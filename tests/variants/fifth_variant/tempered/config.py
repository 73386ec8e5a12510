"""The `tempered` sub-config (`ModelConfig.tempered`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import check_types, positive


@dataclass(frozen=True)
class TemperedConfig:
    tau: float = 1.0

    def __post_init__(self) -> None:
        check_types(self)
        positive("tau", self.tau)
