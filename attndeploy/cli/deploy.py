"""`attndeploy deploy kubernetes`: manifests for NGC Triton (or a KServe InferenceService)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import ForceFlag, JsonFlag, choices, shared
from attndeploy.cli.output import console, error_console, print_json
from attndeploy.deploy.options import DEFAULT_OUT, MAX_REPLICAS, TARGETS, KubernetesOptions
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY


def _default(field: str):
    """`KubernetesOptions`' default for `field`: the library is the one source of defaults."""
    return field_default(KubernetesOptions, field)


Target = choices("Target", TARGETS)


def command(
    target: Annotated[Target, typer.Argument(help="Where to deploy.")],  # type: ignore[valid-type]
    repo: Annotated[Path, shared("--repo", "(Checked first.)")] = DEFAULT_REPOSITORY,
    out: Annotated[Path, shared("--out", "The folder of the manifests.")] = Path(DEFAULT_OUT),
    kserve: Annotated[
        bool, typer.Option("--kserve", help="A KServe InferenceService on its Triton runtime "
                                            "instead of the plain manifests (needs --model-store).")
    ] = _default("kserve"),
    image: Annotated[
        str, typer.Option(help="Triton image; its release tag must be one check-repo knows.")
    ] = _default("image"),
    replicas: Annotated[
        int | None, typer.Option(min=1, max=MAX_REPLICAS,
                                 help="Starting replicas [default: --min-replicas or 2].")
    ] = None,
    min_replicas: Annotated[
        int | None, typer.Option(min=1, max=MAX_REPLICAS,
                                 help="Autoscaler minimum [default: --replicas].")
    ] = None,
    max_replicas: Annotated[
        int | None, typer.Option(min=1, max=MAX_REPLICAS, help=(
            "Autoscaler maximum [default: 4, or more to fit]. At most "
            f"{MAX_REPLICAS}, as are the other replica counts: a practical bound (hundreds of "
            "nodes of tritonserver pods, far beyond what one autoscaled Service runs), which "
            "keeps a typo from letting the autoscaler take the cluster; split a larger fleet."))
    ] = None,
    gpu: Annotated[
        int, typer.Option(help="nvidia.com/gpu per pod; >0 serves the onnxruntime flavour, 0 the "
                               "python flavour.")
    ] = _default("gpu"),
    model_store: Annotated[
        str | None, typer.Option(help="Where pods read the repository: s3://BUCKET/PATH, "
                                      "gs://BUCKET/PATH, pvc://CLAIM[/PATH] or a PVC name "
                                      "[default: shipped in an image, see --models-image].")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace of every object.")] = None,
    name: Annotated[str, typer.Option(help="Name of every object.")] = _default("name"),
    cpu: Annotated[str, typer.Option(help="CPU request per pod.")] = _default("cpu"),
    memory: Annotated[str, typer.Option(help="Memory request per pod.")] = _default("memory"),
    cpu_limit: Annotated[
        str | None, typer.Option(help="CPU limit per pod [default: none].")
    ] = None,
    memory_limit: Annotated[
        str | None, typer.Option(help="Memory limit per pod [default: the request].")
    ] = None,
    target_cpu: Annotated[
        int, typer.Option(help="Autoscaler target: average CPU use, percent of the request.")
    ] = _default("target_cpu"),
    models_image: Annotated[
        str | None, typer.Option(help="Image carrying a local repository for the initContainer "
                                      "[default: attndeploy-models:<digest of the models>].")
    ] = None,
    server_image: Annotated[
        str | None, typer.Option(help="Python flavour: an image with onnxruntime for model.py "
                                      "(and tokenizers for WordPiece text models) [default: "
                                      "built from images/server.Dockerfile].")
    ] = None,
    model: Annotated[
        list[str] | None,
        shared("--model", "Repeatable: serve only these [default: every one of the flavour]."),
    ] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Write deployment manifests for the repository: a Deployment running tritonserver with the
    flags of `attndeploy serve`, a Service, an autoscaler and a disruption budget (or a KServe
    InferenceService), plus a README of the commands that apply them."""
    from attndeploy.deploy import KubernetesOptions, deploy_kubernetes

    options = KubernetesOptions(
        name=name, namespace=namespace, image=image, kserve=kserve, replicas=replicas,
        min_replicas=min_replicas, max_replicas=max_replicas, gpu=gpu, model_store=model_store,
        cpu=cpu, memory=memory, cpu_limit=cpu_limit, memory_limit=memory_limit,
        target_cpu=target_cpu, models_image=models_image, server_image=server_image,
        models=tuple(model or ()),
    )
    result = deploy_kubernetes(repo, out, options, force=force)
    if json_output:
        print_json(result.to_json())
        return
    for warning in result.warnings:
        error_console.print(f"[yellow]warning[/]: {escape(warning)}", highlight=False)
    what = "KServe InferenceService" if result.kserve else "manifests"
    console.print(f"wrote {what} for {', '.join(result.models)} ({result.flavor} flavour, image "
                  f"{result.image}) to [bold]{escape(str(result.out))}[/]; next steps: "
                  f"{escape(str(result.out / 'README.md'))}", highlight=False, soft_wrap=True)
