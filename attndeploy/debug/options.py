"""How a layer-by-layer comparison runs: its options and the tolerance they give a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attndeploy.errors import ValidationError
from attndeploy.validate.compare import (
    GATE_FLIP_TOLERANCE,
    Tolerance,
    check_tolerance_fields,
    default_tolerance,
)

FP16_GATE_FLIP_TOLERANCE = 1e-2  # as validate: a gate logit this close to 0 may round either way


@dataclass(frozen=True)
class DebugOptions:
    """How to compare. None means "the default for this model".

    atol/rtol:           tolerance; None -> by the dtype of the model under test (validate's
                         defaults: fp32 1e-5/1e-4, fp16 1e-2/1e-2).
    gate_flip_tolerance: GA-Net flips accepted where |gate logit| < this (None: 1e-4, fp16 1e-2).
    providers/threads:   onnxruntime execution providers and intra-op threads.
    optimization:        onnxruntime graph optimizations of the run under test ("all", "none").
    inside:              look inside the first diverging node's function.
    progress:            a callback (completed, total, description) or a rich `Progress`.
    """

    atol: float | None = None
    rtol: float | None = None
    gate_flip_tolerance: float | None = None
    providers: tuple[str, ...] | None = None
    threads: int | None = None
    optimization: str = "all"
    inside: bool = True
    progress: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_tolerance_fields(self)
        if self.optimization not in ("all", "none"):
            raise ValidationError(f"unknown onnxruntime optimization {self.optimization!r}; "
                                  "valid: all, none")



def tolerances_for(options: DebugOptions, dtype: str) -> tuple[Tolerance, float]:
    base = default_tolerance(dtype)
    tolerance = Tolerance(base.atol if options.atol is None else options.atol,
                          base.rtol if options.rtol is None else options.rtol)
    flip = options.gate_flip_tolerance
    if flip is None:
        flip = GATE_FLIP_TOLERANCE if dtype == "float32" else FP16_GATE_FLIP_TOLERANCE
    return tolerance, flip
