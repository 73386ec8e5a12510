"""`deploy_kubernetes`: a checked repository -> a folder of manifests and how to apply them.

Order of work: the output is checked (writable, not inside the repository nor holding it, new
unless `force`), then the repository passes check-repo, then the models to serve are chosen (one
flavour: python on CPUs, onnxruntime with GPUs) and their opsets checked against the image's
onnxruntime, and only then is the folder written, atomically (a temp folder renamed).

The folder (`kubectl apply -f OUT/` reads its top-level YAML files only):

- plain: `deployment.yaml`, `service.yaml`, `hpa.yaml`, `pdb.yaml`;
  with `--kserve`: `inferenceservice.yaml` instead;
- `images/models.Dockerfile` (a local repository: the served model folders in a small image that
  the Deployment's initContainer copies into the pod), `images/server.Dockerfile` (the python
  flavour: the NGC image plus the onnxruntime its `model.py` imports, and the packages the served
  text models' tokenizers need, `tokenizers` for WordPiece), `pvc-loader/pod.yaml` (a PVC store:
  a pod to `kubectl cp` the model folders into the claim);
- `README.md` (`deploy.instructions`): the commands to build, upload and apply, with this run's
  names filled in, every word of every command shell-quoted; the values that no shell should see
  (names, stores, images) are refused before that by their own checks (`options.py`), and model
  folder names by `package`'s rule (`select_models`).

An image the user names (`--server-image`, or `--image` with GPUs, where a text model runs on
the image's python backend) cannot be inspected here: when a served model needs a package in it,
`deploy_kubernetes` warns, naming the image and the package.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attndeploy import __version__
from attndeploy.deploy import manifests as mf
from attndeploy.deploy.instructions import (  # noqa: F401  (the folder's files, re-exported)
    MODELS_DOCKERFILE,
    PVC_LOADER,
    README,
    SERVER_DOCKERFILE,
    instructions,
)
from attndeploy.deploy.options import SERVER_PACKAGES, KubernetesOptions
from attndeploy.errors import DeployError, OutputError, RepositoryError
from attndeploy.fsutil import (
    check_output_dir,
    check_replaceable,
    file_sha256,
    same_path,
)
from attndeploy.output_set import atomic_directory
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import check_repository, text_model_requirement
from attndeploy.serving.packaging.text_model import id_model_of

# A served model's folder name: what `attndeploy package` names models (its Dockerfile COPY
# line, its `kubectl cp` and upload paths, its URL paths in Triton's HTTP API all hold it).
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class DeployResult:
    """What `deploy_kubernetes` wrote: files relative to `out`, models served, images to build."""

    out: Path
    files: list[str]
    models: list[str]
    flavor: str
    kserve: bool
    image: str  # the image the server container runs
    images_to_build: dict[str, str]  # image name -> its Dockerfile (relative to out)
    release: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "files": self.files, "models": self.models,
            "flavor": self.flavor, "kserve": self.kserve, "image": self.image,
            "images_to_build": self.images_to_build, "triton_release": self.release,
            "warnings": self.warnings,
        }


# --------------------------------------------------------------------------- checks


def check_output(repo: Path, out: Path, *, force: bool) -> None:
    """Refuse an output that cannot be written, is or would hold the repository, or exists."""
    check_output_dir(out)
    repo_abs, out_abs = Path(repo).resolve(), Path(out).resolve()
    if same_path(repo_abs, out_abs) or repo_abs in out_abs.parents:
        raise OutputError(f"cannot write {out}: it lies inside the repository {repo}, where "
                          "Triton would take it for a model folder; give --out outside it")
    if out_abs in repo_abs.parents:
        raise OutputError(f"cannot write {out}: it holds the repository {repo}, which --force "
                          "would delete; give another --out")
    check_replaceable(out, force=force)


def _flavor_of(config: Any) -> str | None:
    if config.backend == cfgmod.PYTHON_BACKEND:
        return "python"
    if config.platform == cfgmod.ONNXRUNTIME_PLATFORM or config.backend == "onnxruntime":
        return "onnxruntime"
    return None


def _onnx_files(model_dir: Path, config: Any) -> list[Path]:
    name = config.default_model_filename or cfgmod.MODEL_FILE
    return sorted(p / name for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isdigit() and (p / name).is_file())


def _opset(path: Path) -> int | None:
    import onnx

    from attndeploy.interface import default_opset

    return default_opset(onnx.load(str(path), load_external_data=False))


def select_models(repo: Path, options: KubernetesOptions) -> tuple[list[str], list[str]]:
    """(models to serve, warnings): the repository's models of the options' flavour.

    Raises RepositoryError when check-repo rejects the repository, DeployError when no model
    (or a named one) fits, or a model's opset is beyond the image's onnxruntime.
    """
    report = check_repository(repo)
    report.raise_for_errors()
    flavors: dict[str, str | None] = {}
    configs: dict[str, Any] = {}
    for name in report.models:
        text = (repo / name / cfgmod.CONFIG_FILE).read_text(encoding="utf-8")
        configs[name] = cfgmod.parse_config(text, str(repo / name / cfgmod.CONFIG_FILE))
        flavors[name] = _flavor_of(configs[name])
    # A text model (python backend) belongs with the id model it calls: it is served in that
    # model's flavour, and never without it (check-repo has made sure the id model is here).
    id_models = {name: id_model_of(configs[name]) for name in report.models}
    for name, id_model in id_models.items():
        if id_model is not None:
            flavors[name] = flavors.get(id_model)
    wanted = options.flavor
    why = "with --gpu" if options.gpu > 0 else "on CPUs (no --gpu)"
    if options.models:
        unknown = [m for m in options.models if m not in flavors]
        if unknown:
            raise DeployError(f"no model {', '.join(unknown)} in {repo}; it holds "
                              f"{', '.join(report.models)}")
        wrong = [m for m in options.models if flavors[m] != wanted]
        if wrong:
            raise DeployError(f"{', '.join(wrong)}: not the {wanted} flavour, which the pods "
                              f"serve {why}")
        named = list(dict.fromkeys(options.models))
        chosen = list(dict.fromkeys(
            [*named, *(id_models[m] for m in named if id_models[m] is not None)]))
    else:
        chosen = [m for m in report.models if flavors[m] == wanted]
        if not chosen:
            held = ", ".join(f"{m} ({flavors[m] or 'not attndeploy'})" for m in report.models)
            raise DeployError(f"{repo} holds no {wanted}-flavour model, which the pods serve "
                              f"{why}; it holds {held}; package with --flavor {wanted} or both")
    odd = [name for name in chosen if not _MODEL_NAME.fullmatch(name)]
    if odd:
        raise DeployError(
            f"model folder {odd[0]!r}: its name goes into Dockerfile lines and shell commands, so "
            "it must start with a letter or digit and hold only letters, digits, '_', '.' and "
            "'-' (as `attndeploy package` names models); rename it"
        )
    release = options.release
    warnings = [f"{m}: not the {wanted} flavour, not served" for m in report.models
                if m not in chosen and flavors[m] != wanted]
    for name in chosen:
        for path in _onnx_files(repo / name, configs[name]):
            opset = _opset(path)
            if opset is not None and opset > release.max_opset:
                raise DeployError(
                    f"{name}: {path.parent.name}/{path.name} uses opset {opset}; the image's "
                    f"onnxruntime {release.onnxruntime} (Triton {release.ngc}) runs opsets up to "
                    f"{release.max_opset}; re-export with --opset {release.max_opset}"
                )
        if cfgmod.PARAM_EXECUTION_ENV in configs[name].parameters:
            where = configs[name].parameters[cfgmod.PARAM_EXECUTION_ENV].string_value
            raise DeployError(
                f"{name}: its config sets {cfgmod.PARAM_EXECUTION_ENV} to {where}, a path of "
                "this machine that the pods do not have; package it without an execution "
                "environment (the server image brings onnxruntime)"
            )
        kinds = {group.kind for group in configs[name].instance_group}
        if options.gpu > 0 and kinds and cfgmod.mc.ModelInstanceGroup.KIND_GPU not in kinds:
            warnings.append(f"{name}: its instance_group is not KIND_GPU, so it runs on the CPU "
                            "of a GPU pod; package with --kind gpu")
    return chosen, warnings


def server_packages(repo: Path, models: list[str]) -> dict[str, tuple[str, str]]:
    """{model: (what needs it, Python package)} for the served models that need a package in the
    server's Python: a WordPiece text model's tokenizer needs `tokenizers`, an image model's
    `NAME_image` needs `pillow` to decode the images."""
    needs = {name: text_model_requirement(repo / name) or _generate_requirement(repo / name)
             or _image_requirement(repo / name) for name in models}
    return {name: need for name, need in needs.items() if need is not None}


def _served_config(folder: Path):
    """The folder's parsed config.pbtxt, or None where it has none that parses."""
    try:
        return cfgmod.parse_config((folder / cfgmod.CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RepositoryError):
        return None


def _image_requirement(folder: Path) -> tuple[str, str] | None:
    """An image model's package need (`NAME_image` decodes PNG and JPEG with Pillow)."""
    from attndeploy.serving.packaging.image_model import is_image_config

    cfg = _served_config(folder)
    return (IMAGE_DECODING, "pillow") if cfg is not None and is_image_config(cfg) else None


def _generate_requirement(folder: Path) -> tuple[str, str] | None:
    """A generate model's package need (a pretrained decoder's tokenizer.json: `tokenizers`)."""
    from attndeploy.serving.packaging.generate_model import generate_model_requirement

    cfg = _served_config(folder)
    return None if cfg is None else generate_model_requirement(cfg)


IMAGE_DECODING = "image"  # the need's kind for an image model (`_image_requirement`)


def pip_requirement(package: str) -> str:
    """`NAME~=SERIES.0`: the release series of `SERVER_PACKAGES` that the server image installs."""
    return f"{package}~={SERVER_PACKAGES[package]}.0"


def image_warnings(options: KubernetesOptions, needs: dict[str, tuple[str, str]]) -> list[str]:
    """A warning per served model that needs a package in an image the user names: the python
    flavour's `--server-image`, or with GPUs `--image` itself (its python backend runs the text
    model; the NGC image has no `tokenizers`). The image built from images/server.Dockerfile
    installs them; nothing is said then."""
    if options.gpu == 0 and options.server_image is None:
        return []
    warnings = []
    for name, (kind, package) in needs.items():
        needer = "image decoding" if kind == IMAGE_DECODING else f"{kind} tokenizer"
        head = (f"{name}: its {needer} needs the Python package {package!r} in the "
                "server's Python, or the model fails to load:")
        if options.gpu == 0:
            warnings.append(f"{head} --server-image {options.server_image} must have it "
                            f'installed (pip install "{pip_requirement(package)}")')
        else:
            warnings.append(
                f"{head} the pods run --image {options.image} (its python backend runs the text "
                "model), which must have it; the NGC image does not: build one FROM it with "
                f'pip install "{pip_requirement(package)}", tag it {options.release.ngc}-py3 '
                "and pass it as --image"
            )
    return warnings


def models_digest(repo: Path, models: list[str]) -> str:
    """12 hex digits over the served folders' file names and contents: a new tag for new models,
    so that a changed repository rolls the pods."""
    digest = hashlib.sha256()
    for name in sorted(models):
        for path in sorted(p for p in (repo / name).rglob("*") if p.is_file()):
            digest.update(f"{path.relative_to(repo).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()[:12]


# --------------------------------------------------------------------------- rendering


def _header(what: str) -> str:
    return (f"# {what}\n# Generated by attndeploy {__version__} (`attndeploy deploy kubernetes`); "
            "run it again rather than edit.\n")


class _Dumper(yaml.SafeDumper):
    """safe_dump's dumper, writing a string of several lines (the server's start script) as a
    literal block (`|`), line by line as it runs, rather than as one quoted, folded line."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def render_yaml(documents: list[dict[str, Any]], what: str) -> str:
    body = "---\n".join(yaml.dump(doc, Dumper=_Dumper, sort_keys=False,
                                  default_flow_style=False, width=100)
                        for doc in documents)
    return _header(what) + body


def models_dockerfile(models: list[str]) -> str:
    lines = [
        _header("The served model folders, copied into each pod by the initContainer "
                "`copy-models`. Build context: the model repository."),
        "FROM busybox:1.36",
        *(f"COPY {name} {mf.MODELS_IMAGE_ROOT}/{name}" for name in models),
    ]
    return "\n".join(lines) + "\n"


def server_dockerfile(options: KubernetesOptions, packages: tuple[str, ...] = ()) -> str:
    """The python flavour's image: `options.image` plus onnxruntime and `packages`."""
    release = options.release
    what = (f" and {', '.join(packages)} for the served models (text models' tokenizers, "
            "image models' decoding)" if packages else "")
    requirements = [f"onnxruntime~={release.onnxruntime}.0", *map(pip_requirement, packages)]
    return "\n".join([
        _header(f"Triton {release.ngc} plus the onnxruntime its onnxruntime backend bundles "
                f"({release.onnxruntime}), for the python flavour's model.py (the NGC image has "
                f"no onnxruntime for Python){what}. Build context: any folder."),
        f"FROM {options.image}",
        # Newer releases' Python is marked externally managed (PEP 668); the variable lets pip
        # install into it there, and older pips ignore it.
        "RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir "
        + " ".join(f'"{requirement}"' for requirement in requirements),
    ]) + "\n"


def build_files(repo: Path, out: Path, plan: mf.Plan) -> tuple[dict[str, str], dict[str, str]]:
    """({relative path: text}, {image to build: its Dockerfile}) for the plan."""
    options, store = plan.options, plan.store
    files: dict[str, str] = {}
    images: dict[str, str] = {}
    if options.flavor == "python" and options.server_image is None:
        files[SERVER_DOCKERFILE] = server_dockerfile(options, plan.server_packages)
        images[plan.serving_image] = SERVER_DOCKERFILE
    if options.kserve:
        files["inferenceservice.yaml"] = render_yaml(
            [mf.inference_service(plan)], "KServe InferenceService on the Triton runtime")
    else:
        if plan.models_image is not None:
            files[MODELS_DOCKERFILE] = models_dockerfile(list(plan.models))
            images[plan.models_image] = MODELS_DOCKERFILE
        files["deployment.yaml"] = render_yaml([mf.deployment(plan)], "tritonserver Deployment")
        files["service.yaml"] = render_yaml(
            [mf.service(plan)], "ClusterIP Service: HTTP 8000, gRPC 8001, metrics 8002")
        files["hpa.yaml"] = render_yaml([mf.autoscaler(plan)], "HorizontalPodAutoscaler (CPU)")
        files["pdb.yaml"] = render_yaml([mf.disruption_budget(plan)], "PodDisruptionBudget")
    if store is not None and store.kind == "pvc":
        files[PVC_LOADER] = render_yaml(
            [mf.pvc_loader_pod(plan)], "A pod for `kubectl cp` into the PVC; delete it after")
    files[README] = instructions(repo, out, plan, images)
    return files, images


def deploy_kubernetes(
    repo: Path, out: Path, options: KubernetesOptions, *, force: bool = False
) -> DeployResult:
    """Write Kubernetes manifests for `repo` into the folder `out` (see the module docstring).

    Raises OutputError (bad `out`), RepositoryError (check-repo's errors) or DeployError (no model
    to serve, an opset beyond the image's onnxruntime, a path or model name that the README's
    command lines cannot hold), all before anything is written.
    """
    repo, out = Path(repo), Path(out)
    for option, path in (("--repo", repo), ("--out", out)):
        if _CONTROL.search(str(path)):
            raise DeployError(f"{option} {str(path)!r}: a path with a control character (a "
                              "newline, a tab...) cannot be written into the README's command "
                              "lines; use another path")
    if not repo.is_dir():
        raise RepositoryError(f"model repository {repo} is not a directory; build it with "
                              "`attndeploy package`")
    check_output(repo, out, force=force)
    models, warnings = select_models(repo, options)
    needs = server_packages(repo, models)
    warnings += image_warnings(options, needs)
    models_image = None
    if options.store is None:
        models_image = options.models_image or f"attndeploy-models:{models_digest(repo, models)}"
    packages = tuple(sorted({package for _, package in needs.values()}))
    plan = mf.Plan(options=options, models=tuple(models), models_image=models_image,
                   server_packages=packages)
    files, images = build_files(repo, out, plan)
    with atomic_directory(out, replace=force) as staging:
        for relative, text in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    release = options.release
    return DeployResult(
        out=out, files=sorted(files), models=models, flavor=options.flavor,
        kserve=options.kserve, image=plan.serving_image, images_to_build=images,
        release={"ngc": release.ngc, "server": release.server,
                 "onnxruntime": release.onnxruntime, "max_opset": release.max_opset},
        warnings=warnings,
    )
