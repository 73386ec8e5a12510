"""Strict schema checks: Kubernetes 1.30 objects (kubernetes-validate's offline schemas) and the
KServe InferenceService (the vendored schema in golden/, whose Kubernetes types refer to the
same 1.30 definitions). Strict = an unknown field anywhere is an error, as with
`kubectl apply --validate=strict`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="install the test extra: pip install -e '.[test]'"
)
from kubernetes_validate import utils as kv  # noqa: E402

K8S_VERSION = "1.30.0"
K8S_DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"
KSERVE_SCHEMA = (Path(__file__).parent / "golden"
                 / "kserve-0.14.1-inferenceservice-v1beta1.schema.json")
DEFINITIONS = f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json"


class SchemaError(AssertionError):
    """A document that its schema rejects: where and why."""


@functools.cache
def k8s_definitions() -> dict[str, Any]:
    """The `$defs` of the Kubernetes 1.30 strict schemas."""
    return kv.schema_contents(DEFINITIONS, K8S_VERSION)["$defs"]


def validate_k8s(document: dict[str, Any]) -> str:
    """Validate strictly against Kubernetes 1.30; return the version used, raise SchemaError."""
    try:
        return kv.validate(document, K8S_VERSION, strict=True)
    except kv.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path)
        raise SchemaError(f"{document.get('kind')}: {where}: {exc.message}") from None
    except kv.SchemaNotFoundError as exc:
        raise SchemaError(exc.message) from None


@functools.cache
def _kserve_validator() -> Any:
    import jsonschema
    from referencing import Registry, Resource

    schema = json.loads(KSERVE_SCHEMA.read_text())
    definitions = kv.schema_contents(DEFINITIONS, K8S_VERSION)
    registry = Registry().with_resources([
        (K8S_DEFINITIONS_ID, Resource.from_contents(definitions)),
        (schema["$id"], Resource.from_contents(schema)),
    ])
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_kserve(document: dict[str, Any]) -> None:
    """Validate strictly against the vendored KServe 0.14.1 InferenceService schema."""
    errors = sorted(_kserve_validator().iter_errors(document), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = ".".join(str(part) for part in first.path)
        raise SchemaError(f"InferenceService: {where}: {first.message} "
                          f"({len(errors)} error(s))")


def validate(document: dict[str, Any]) -> None:
    if document.get("apiVersion", "").startswith("serving.kserve.io/"):
        validate_kserve(document)
    else:
        validate_k8s(document)
