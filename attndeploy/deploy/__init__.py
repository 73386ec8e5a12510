"""Deployment beyond one machine: Kubernetes manifests for NGC Triton or KServe.

`deploy_kubernetes(repo, out, KubernetesOptions(...))` checks the repository (check-repo), picks
the models of the flavour the pods serve and writes the manifests, the Dockerfiles they need and
a README of commands into `out`. See `attndeploy.deploy.kubernetes`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DeployResult",
    "KubernetesOptions",
    "ModelStore",
    "deploy_kubernetes",
    "parse_model_store",
]

# Imported on first use, so that reading `KubernetesOptions`' defaults (the CLI does at start)
# does not load the repository checker and its numpy, onnx and protobuf.
_HOMES = {
    "DeployResult": "attndeploy.deploy.kubernetes",
    "deploy_kubernetes": "attndeploy.deploy.kubernetes",
    "KubernetesOptions": "attndeploy.deploy.options",
    "ModelStore": "attndeploy.deploy.options",
    "parse_model_store": "attndeploy.deploy.options",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'attndeploy.deploy' has no attribute {name!r}")
