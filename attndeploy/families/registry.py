"""One `FamilySpec` per model family: what kind of model it is, declared once.

A family is the kind of model: what goes in, what comes out, how it is trained, checked, decoded
and served. Its name is the task name the ecosystem already uses (Optimum's `--task`,
transformers' pipelines): `text-classification`, `token-classification`, and to come
`text-generation`, `translation`, `image-classification`. Attention variants are orthogonal: any
variant runs in any family whose architecture it supports.

Each family is one package, `attndeploy/families/<package>/`, whose `__init__.py` registers its
spec with `register_family(FamilySpec(...))`. The packages are found by walking this folder
(`family_specs()`), so no list of families exists anywhere else. A spec is light (no torch, no
onnx at import): what a stage needs beyond the declarations here lives in the family's part
modules, named by import path and imported by the stage that uses them, each through its own
layer's loader (`runtime.families.runtime_part`, `models.families.training_part`,
`validate.families.checks_part`), so no module imports a layer above its own:

- `runtime` (numpy only, shipped beside a served text model; runtime layer): decode, the
  prediction contract's fields and their wire codec, the table `predict` prints;
- `training` (torch; models layer, since the checkpoint reader rebuilds the head with it):
  data reading, head, loss, labels, metrics, the baseline trained beside it;
- `checks` (torch, onnx; validate layer): what parity means, the validation grid, quantize's
  and debug's checks.

`docs/adding-a-family.md` describes each part's functions; a test holds the document to the code.

The `head` is the short key a checkpoint's config (`ModelConfig.head`) and an export's metadata
store (`classification`, `tagging`): every checkpoint and export made before families existed
reads the same.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attndeploy.errors import ConfigError

_REGISTRY: dict[str, FamilySpec] = {}
PARTS = ("runtime", "training", "checks")


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """One model family (see the module docstring).

    name:          the ecosystem's task name, e.g. `text-classification`.
    head:          the key stored in `ModelConfig.head` and an export's config, e.g.
                   `classification`; unique among families.
    order:         its place in tables and choices.
    summary:       one line for help texts and `info`.
    outputs:       (num_labels, **options) -> the model-level outputs
                   (`attndeploy.interface.TensorSpec`s) before a variant's own (gates), in
                   order; `options` are the model's own choices a family may read (a tagger's
                   `tag_head`) and others ignore.
    inputs:        () -> the model-level inputs, in order; None: a text model's (`input_ids`,
                   `attention_mask`, int64 [batch, seq]; `attndeploy.interface.text_inputs`).
    architectures: the built-in model architectures that take this head (`ModelConfig.family`,
                   `train --architecture`: `transformer`, `bilstm`).
    pooled:        its head pools the tokens into one vector with the model's pooling (a gated
                   variant's is its `GatedAttentionPooling` node, which the export then holds).
    min_labels:    the least `num_labels` a model of it has (a classifier 2, a regressor 1).
    hf_heads:      the suffixes of the Hugging Face architectures converted into it
                   (`ForSequenceClassification`).
    runtime, training, checks: the module paths of its parts; default `<package>.<part>`.
    title:         its name in prose and report headings; default `name`.
    """

    name: str
    head: str
    order: int
    summary: str
    outputs: Callable[..., tuple[Any, ...]]
    inputs: Callable[[], tuple[Any, ...]] | None = None
    architectures: tuple[str, ...] = ("transformer",)
    pooled: bool = False
    min_labels: int = 2
    hf_heads: tuple[str, ...] = ()
    runtime: str = ""
    training: str = ""
    checks: str = ""
    title: str = ""
    package: str = ""  # filled in by register_family: the package that registered it

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", self.name)

    def part(self, kind: str) -> str:
        """The module path of one of its parts (`PARTS`)."""
        if kind not in PARTS:
            raise ConfigError(f"unknown family part {kind!r}; valid: {', '.join(PARTS)}")
        return getattr(self, kind) or f"{self.package}.{kind}"


def register_family(spec: FamilySpec, package: str) -> FamilySpec:
    """Register `spec` (from `package`, its `__init__`'s `__name__`); the stored spec knows its
    package. A second family with the same name or head is refused."""
    spec = dataclasses.replace(spec, package=package)
    for other in _REGISTRY.values():
        if spec.name == other.name or spec.head == other.head:
            raise ConfigError(f"family {spec.name!r} (head {spec.head!r}) is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


_DISCOVERED = False


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg and not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")


def family_specs() -> tuple[FamilySpec, ...]:
    """Every registered family, in `order`."""
    _discover()
    return tuple(sorted(_REGISTRY.values(), key=lambda spec: (spec.order, spec.name)))


def family_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in family_specs())


def architecture_names() -> tuple[str, ...]:
    """Every registered family's built-in architectures, each once, in family order."""
    return tuple(dict.fromkeys(name for spec in family_specs() for name in spec.architectures))


def family_spec(name: str) -> FamilySpec:
    """The family called `name`; ConfigError naming the valid ones."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown model family {name!r}; valid: "
                          f"{', '.join(family_names())}") from None


def family_for_head(head: str) -> FamilySpec:
    """The family whose config key is `head` (`classification` -> text-classification);
    ConfigError naming the valid heads."""
    for spec in family_specs():
        if spec.head == head:
            return spec
    raise ConfigError(f"unknown head {head!r}; valid: "
                      f"{', '.join(spec.head for spec in family_specs())}")


def heads() -> tuple[str, ...]:
    """Every family's head, in order: the valid values of `ModelConfig.head`."""
    return tuple(spec.head for spec in family_specs())
