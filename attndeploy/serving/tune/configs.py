"""Candidates to and from Triton configs, through protobuf one section at a time.

`read_candidate` reads the candidate a repository serves now; `package_default` the one
`attndeploy package` writes with `PackageOptions()` (its own config builders, read back);
`candidate_configs` writes a candidate into copies of the target's configs, everything else in
them (I/O, warm-up, limits, parameters) kept as packaged.

A text model that runs its id model's ONNX itself holds the candidate's batching, instances and
threads in its own config (its id model is not on the text path and keeps its config; only the
version it serves follows the candidate's precision). A text model that calls its id model by
BLS holds only its own instances and queue delay; its `max_batch_size` follows the id model's:
one text-model execution becomes one id-model request, so it may not exceed the id model's
(check-repo refuses that), and a smaller one would only split batches the id model could take
whole.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.runtime.names import META_VERSION
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.generic import read_generic_info
from attndeploy.serving.packaging.onnx_info import load_onnx_graph, read_model_info
from attndeploy.serving.packaging.options import Flavor, PackageOptions
from attndeploy.serving.packaging.text_model import (
    CALL_ONNXRUNTIME,
    PARAM_ID_VERSION,
    build_text_config,
    call_of,
    text_call,
)
from attndeploy.serving.tune.space import (
    FP32,
    INT8,
    PREFERRED_HALF,
    PREFERRED_MAX,
    PREFERRED_NONE,
    Candidate,
)
from attndeploy.serving.tune.target import TuneTarget


def _instances(cfg: mc.ModelConfig) -> int:
    """Instances of all groups (Triton takes an unset count for 1)."""
    return max(1, sum(group.count or 1 for group in cfg.instance_group))


def _delay(cfg: mc.ModelConfig) -> int:
    return cfg.dynamic_batching.max_queue_delay_microseconds \
        if cfg.HasField("dynamic_batching") else 0


def _preferred(cfg: mc.ModelConfig) -> str:
    sizes = list(cfg.dynamic_batching.preferred_batch_size) \
        if cfg.HasField("dynamic_batching") else []
    top = cfg.max_batch_size
    if not sizes:
        return PREFERRED_NONE
    if sizes == [top]:
        return PREFERRED_MAX
    if sorted(set(sizes)) == sorted({max(1, top // 2), top}):
        return PREFERRED_HALF
    return ",".join(str(size) for size in sizes)


def _threads(cfg: mc.ModelConfig) -> int:
    raw = cfg.parameters[cfgmod.PARAM_ORT_THREADS].string_value \
        if cfgmod.PARAM_ORT_THREADS in cfg.parameters else "1"
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def read_candidate(id_config: mc.ModelConfig, text_config: mc.ModelConfig | None,
                   precision: str = FP32) -> Candidate:
    """The candidate these configs hold (`precision`: which ONNX the id model serves)."""
    if text_config is not None and call_of(text_config) == CALL_ONNXRUNTIME:
        return read_candidate(text_config, None, precision)  # the text model runs the ONNX
    return Candidate(
        max_batch_size=id_config.max_batch_size,
        max_queue_delay_us=_delay(id_config),
        instances=_instances(id_config),
        threads=_threads(id_config),
        preferred=_preferred(id_config),
        precision=precision,
        text_instances=_instances(text_config) if text_config is not None else None,
        text_queue_delay_us=_delay(text_config) if text_config is not None else None,
    )


def package_default(target: TuneTarget) -> Candidate:
    """What `attndeploy package` writes for this model with `PackageOptions()`: its own config
    builders run on the model's metadata, read back (a text model run by BLS as packaged with
    `--text-bls`: the way it runs its id model is not a tuned dimension)."""
    options = PackageOptions(flavor=Flavor.PYTHON, text_bls=target.text_config is not None
                             and not target.text_runs_onnx)
    model = load_onnx_graph(target.onnx_path)
    if target.generic:
        version = next(p.value for p in model.metadata_props if p.key == META_VERSION)
        generic = read_generic_info(model, version, str(target.onnx_path))
        id_config = cfgmod.build_generic_config(generic, options, name=target.id_model,
                                                flavor=Flavor.PYTHON)
        return read_candidate(id_config, None)
    info = read_model_info(model, source=str(target.onnx_path))
    id_config = cfgmod.build_config(info, options, name=target.id_model, flavor=Flavor.PYTHON)
    text_config = None
    if target.text_model is not None:
        text_config = build_text_config(
            info, options, name=target.text_model, id_model=target.id_model,
            call=text_call(options, calls_python_flavor=True))  # tuning needs the python flavour
    return read_candidate(id_config, text_config)


def can_batch_ragged(target: TuneTarget) -> bool:
    """Whether the id model batches requests of different lengths (an attndeploy id model's
    model.py pads them): then a candidate may turn its dynamic batcher on."""
    return not target.generic


def served_version(target: TuneTarget, candidate: Candidate) -> int:
    """The id model's version a candidate serves: int8 is the next free version folder."""
    return target.next_version if candidate.precision == INT8 else target.version


# --------------------------------------------------------------------------- sections


def _set_batching(cfg: mc.ModelConfig, candidate: Candidate, *, ragged: bool) -> None:
    """`max_batch_size`, the batcher's delay and preferred sizes (a model without a batch dim,
    max_batch_size 0, keeps none)."""
    if cfg.max_batch_size == 0 or candidate.max_batch_size == 0:
        return
    cfg.max_batch_size = candidate.max_batch_size
    if not cfg.HasField("dynamic_batching"):
        if not ragged:
            return
        cfg.dynamic_batching.SetInParent()
        for entry in cfg.input:  # as `package` writes a batching python flavour
            entry.allow_ragged_batch = True
    cfg.dynamic_batching.max_queue_delay_microseconds = candidate.max_queue_delay_us
    del cfg.dynamic_batching.preferred_batch_size[:]
    cfg.dynamic_batching.preferred_batch_size.extend(candidate.preferred_sizes())


def _set_instances(cfg: mc.ModelConfig, count: int) -> None:
    """One instance group of `count`, of the kind the first group had (CPU by default)."""
    kind = cfg.instance_group[0].kind if cfg.instance_group else mc.ModelInstanceGroup.KIND_CPU
    del cfg.instance_group[:]
    group = cfg.instance_group.add()
    group.count = count
    group.kind = kind


def _set_version(cfg: mc.ModelConfig, version: int) -> None:
    cfg.ClearField("version_policy")
    cfg.version_policy.specific.versions.append(version)


def id_config(target: TuneTarget, candidate: Candidate, *, version: int | None = None
              ) -> mc.ModelConfig:
    """The id model's config holding `candidate` (serving `version`, default its own); the
    id model of a text model that runs the ONNX itself keeps everything but the version."""
    cfg = mc.ModelConfig()
    cfg.CopyFrom(target.id_config)
    if target.text_runs_onnx:
        _set_version(cfg, served_version(target, candidate) if version is None else version)
        return cfg
    _set_batching(cfg, candidate, ragged=can_batch_ragged(target))
    _set_instances(cfg, candidate.instances)
    cfg.parameters[cfgmod.PARAM_ORT_THREADS].string_value = str(candidate.threads)
    _set_version(cfg, served_version(target, candidate) if version is None else version)
    return cfg


def text_config(target: TuneTarget, candidate: Candidate, *, id_version: int | None = None
                ) -> mc.ModelConfig:
    """The text model's config holding `candidate`, calling `id_version` of the id model."""
    if target.text_config is None or (candidate.text_instances is None
                                      and not target.text_runs_onnx):
        raise ValueError("text_config needs a text model and a candidate for it")
    cfg = mc.ModelConfig()
    cfg.CopyFrom(target.text_config)
    version = served_version(target, candidate) if id_version is None else id_version
    cfg.parameters[PARAM_ID_VERSION].string_value = str(version)
    if target.text_runs_onnx:  # the model that runs the ONNX: the candidate is its own
        _set_batching(cfg, candidate, ragged=False)
        _set_instances(cfg, candidate.instances)
        cfg.parameters[cfgmod.PARAM_ORT_THREADS].string_value = str(candidate.threads)
        return cfg
    if candidate.max_batch_size > 0:
        cfg.max_batch_size = candidate.max_batch_size  # tied: see the module docstring
    cfg.dynamic_batching.max_queue_delay_microseconds = candidate.text_queue_delay_us or 0
    _set_instances(cfg, candidate.text_instances)  # type: ignore[arg-type]
    return cfg


def candidate_configs(target: TuneTarget, candidate: Candidate) -> dict[str, mc.ModelConfig]:
    """{model name: config} of every model `candidate` sets (the text model first)."""
    configs = {}
    if target.text_model is not None:
        configs[target.text_model] = text_config(target, candidate)
    configs[target.id_model] = id_config(target, candidate)
    return configs
