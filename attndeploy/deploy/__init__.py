"""Deployment beyond one machine: Kubernetes manifests for NGC Triton or KServe.

`deploy_kubernetes(repo, out, KubernetesOptions(...))` checks the repository (check-repo), picks
the models of the flavour the pods serve and writes the manifests, the Dockerfiles they need and
a README of commands into `out`. See `attndeploy.deploy.kubernetes`.
"""

from attndeploy.deploy.kubernetes import DeployResult, deploy_kubernetes
from attndeploy.deploy.options import KubernetesOptions, ModelStore, parse_model_store

__all__ = [
    "DeployResult",
    "KubernetesOptions",
    "ModelStore",
    "deploy_kubernetes",
    "parse_model_store",
]
