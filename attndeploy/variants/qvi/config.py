"""QVI's sub-config (`ModelConfig.qvi`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import check_types, choice, positive

QVI_FORMS = ("pooled", "pairwise")


@dataclass(frozen=True)
class QVIConfig:
    """Query-value interaction (docs/variants.md §2). `pairwise_chunk` = query block size."""

    form: str = "pooled"
    pairwise_chunk: int = 64

    def __post_init__(self) -> None:
        check_types(self)
        choice("qvi form", self.form, QVI_FORMS)
        positive("pairwise_chunk", self.pairwise_chunk)
