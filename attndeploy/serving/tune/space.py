"""The candidate space: one `Candidate` is one serving configuration; `SearchSpace` says which
values each of its dimensions may take and which candidates are pruned before measuring.

Dimensions (the fields of `Candidate`) and the values `SearchSpace` tries by default:

- `precision`: which ONNX the id model serves, `fp32` (the packaged one) or `int8` (offered
  with an int8 file);
- `max_batch_size`: the id model's (and a BLS text model's: tied), 1, 2, 4, ..., 64;
- `instances`: the id model's `instance_group.count`, 1-4;
- `max_queue_delay_us`: the id model's `dynamic_batching.max_queue_delay_microseconds`, 0-2000;
- `threads`: onnxruntime intra-op threads per instance (`ORT_THREADS`), 1, 2, 4;
- `preferred`: `dynamic_batching.preferred_batch_size`, `none`, `max` ([max_batch_size]) or
  `half+max` ([max_batch_size / 2, max_batch_size]);
- `text_instances`: the text model's `instance_group.count`, 1-3;
- `text_queue_delay_us`: the text model's own queue delay, 0, 100, 500.

For a text model that runs its id model's ONNX itself (the package default), the model that
runs the ONNX is the text model: the id-model dimensions above are its own, and it has no text
dimensions. The text dimensions apply only to a text model that calls its id model by BLS
(`text_instances` is not None); the
batching dimensions only when the model batches (`max_batch_size` > 0). A candidate whose
instances times threads exceed `cores` is pruned unmeasured: more onnxruntime threads than cores
only contend (model analyzer bounds its instance counts the same way).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from attndeploy.errors import ConfigError

FP32 = "fp32"
INT8 = "int8"
PRECISIONS = (FP32, INT8)
PREFERRED_NONE = "none"
PREFERRED_MAX = "max"
PREFERRED_HALF = "half+max"
PREFERRED = (PREFERRED_NONE, PREFERRED_MAX, PREFERRED_HALF)

# The order in which the search walks the dimensions: the cheap big levers first (one
# measurement tells whether int8 pays), batching before the instance and thread counts that
# share the cores, the text model's own settings last.
DIMENSION_ORDER = ("precision", "max_batch_size", "instances", "max_queue_delay_us", "threads",
                   "preferred", "text_instances", "text_queue_delay_us")
ORDERED = frozenset({"max_batch_size", "instances", "max_queue_delay_us", "threads",
                     "text_instances", "text_queue_delay_us"})
TEXT_DIMENSIONS = frozenset({"text_instances", "text_queue_delay_us"})
BATCHING_DIMENSIONS = frozenset({"max_batch_size", "max_queue_delay_us", "preferred"})


def _is_count(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _explicit_sizes(text: str) -> tuple[int, ...] | None:
    """"4,8" -> (4, 8); None unless every part is a positive integer."""
    parts = text.split(",")
    if not all(part.isdigit() and int(part) > 0 for part in parts):
        return None
    return tuple(int(part) for part in parts)


@dataclass(frozen=True)
class Candidate:
    """One serving configuration of an id model (and of the text model calling it).

    `max_batch_size` 0 is a model without a batch dim (nothing to batch). `preferred` is one of
    `PREFERRED` or explicit sizes "4,8" (as read from a repository's config).
    `text_instances` / `text_queue_delay_us` are None when no text model is tuned.
    """

    max_batch_size: int
    max_queue_delay_us: int
    instances: int
    threads: int
    preferred: str = PREFERRED_NONE
    precision: str = FP32
    text_instances: int | None = None
    text_queue_delay_us: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if not _is_count(self.max_batch_size, 0):
            problems.append(f"max_batch_size must be an integer >= 0, got {self.max_batch_size!r}")
        for name in ("instances", "threads"):
            if not _is_count(getattr(self, name), 1):
                problems.append(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not _is_count(self.max_queue_delay_us, 0):
            problems.append("max_queue_delay_us must be an integer >= 0, got "
                            f"{self.max_queue_delay_us!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got "
                            f"{self.precision!r}")
        if self.preferred not in PREFERRED and _explicit_sizes(self.preferred) is None:
            problems.append(f"preferred must be one of {', '.join(PREFERRED)} or sizes like "
                            f"'4,8', got {self.preferred!r}")
        if (self.text_instances is None) != (self.text_queue_delay_us is None):
            problems.append("text_instances and text_queue_delay_us go together (a text model) "
                            "or are both None")
        if self.text_instances is not None and not _is_count(self.text_instances, 1):
            problems.append(f"text_instances must be an integer >= 1, got {self.text_instances!r}")
        if self.text_queue_delay_us is not None and not _is_count(self.text_queue_delay_us, 0):
            problems.append("text_queue_delay_us must be an integer >= 0, got "
                            f"{self.text_queue_delay_us!r}")
        if problems:
            raise ConfigError("invalid tuning candidate: " + "; ".join(problems))

    @property
    def has_text(self) -> bool:
        return self.text_instances is not None

    def preferred_sizes(self) -> tuple[int, ...]:
        """The dynamic batcher's `preferred_batch_size` list for this `max_batch_size`."""
        top = self.max_batch_size
        if top == 0 or self.preferred == PREFERRED_NONE:
            return ()
        if self.preferred == PREFERRED_MAX:
            return (top,)
        if self.preferred == PREFERRED_HALF:
            return tuple(sorted({max(1, top // 2), top}))
        sizes = _explicit_sizes(self.preferred) or ()
        return tuple(size for size in sizes if size <= top)

    @property
    def name(self) -> str:
        """Short and unique: `b16-d500-i2-t1`, then `-pmax`/`-phalf`/`-p4.8`, `-int8`, and
        for a text model `-ti1-td0`."""
        parts = [f"b{self.max_batch_size}", f"d{self.max_queue_delay_us}",
                 f"i{self.instances}", f"t{self.threads}"]
        if self.preferred != PREFERRED_NONE:
            tag = {PREFERRED_MAX: "max", PREFERRED_HALF: "half"}.get(
                self.preferred, self.preferred.replace(",", "."))
            parts.append(f"p{tag}")
        if self.precision != FP32:
            parts.append(self.precision)
        if self.has_text:
            parts += [f"ti{self.text_instances}", f"td{self.text_queue_delay_us}"]
        return "-".join(parts)

    def with_value(self, dimension: str, value: Any) -> Candidate:
        return replace(self, **{dimension: value})

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["name"] = self.name
        out["preferred_batch_sizes"] = list(self.preferred_sizes())
        return out


@dataclass(frozen=True)
class Dimension:
    """The values one dimension may take around a candidate (ordered: a line to walk along;
    else a set of alternatives)."""

    name: str
    values: tuple[Any, ...]
    ordered: bool


def _default_cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class SearchSpace:
    """The values of every dimension (see the module docstring) and the core bound."""

    max_batch_size: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    max_queue_delay_us: tuple[int, ...] = (0, 100, 250, 500, 1000, 2000)
    instances: tuple[int, ...] = (1, 2, 3, 4)
    threads: tuple[int, ...] = (1, 2, 4)
    preferred: tuple[str, ...] = PREFERRED
    precision: tuple[str, ...] = (FP32,)
    text_instances: tuple[int, ...] = (1, 2, 3)
    text_queue_delay_us: tuple[int, ...] = (0, 100, 500)
    cores: int = field(default_factory=_default_cores)

    def __post_init__(self) -> None:
        for name in DIMENSION_ORDER:
            values = getattr(self, name)
            if isinstance(values, (str, int)):
                values = (values,)
            object.__setattr__(self, name, tuple(values))
            if not getattr(self, name):
                raise ConfigError(f"the search space's {name} has no value")
            if name in ORDERED:
                minimum = 0 if name in ("max_queue_delay_us", "text_queue_delay_us") else 1
                bad = [v for v in getattr(self, name) if not _is_count(v, minimum)]
                if bad:
                    raise ConfigError(f"the search space's {name} must be integers >= "
                                      f"{minimum}, got {bad}")
        unknown = set(self.precision) - set(PRECISIONS)
        if unknown:
            raise ConfigError(f"unknown precision(s) {sorted(unknown)}; valid: "
                              f"{', '.join(PRECISIONS)}")
        if not _is_count(self.cores, 1):
            raise ConfigError(f"cores must be an integer >= 1, got {self.cores!r}")

    def with_int8(self) -> SearchSpace:
        """This space with int8 offered beside fp32."""
        return replace(self, precision=tuple(dict.fromkeys((*self.precision, INT8))))

    def dimensions(self, around: Candidate) -> list[Dimension]:
        """The dimensions that apply to `around`, in `DIMENSION_ORDER`, each holding
        `around`'s own value (ordered ones sorted)."""
        out = []
        for name in DIMENSION_ORDER:
            if name in TEXT_DIMENSIONS and not around.has_text:
                continue
            if name in BATCHING_DIMENSIONS and around.max_batch_size == 0:
                continue
            current = getattr(around, name)
            values = tuple(getattr(self, name))
            if current not in values:
                values = (*values, current)
            if name in ORDERED:
                values = tuple(sorted(set(values)))
            if len(values) > 1:
                out.append(Dimension(name, values, name in ORDERED))
        return out

    def pruned(self, candidate: Candidate) -> str | None:
        """Why `candidate` is not worth measuring, or None."""
        used = candidate.instances * candidate.threads
        if used > self.cores:
            return (f"{candidate.instances} instance(s) x {candidate.threads} thread(s) = {used} "
                    f"onnxruntime threads on {self.cores} core(s)")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {name: list(getattr(self, name)) for name in DIMENSION_ORDER} | {
            "cores": self.cores}
