"""Write the vendored KServe InferenceService schema from the KServe Python SDK's models.

    pip download --no-deps kserve==0.14.1 -d /tmp/kserve
    python -m tests.deploy.make_kserve_schema /tmp/kserve/kserve-0.14.1-py3-none-any.whl

Why not the CRD file itself: KServe's `config/crd/full/serving.kserve.io_inferenceservices.yaml`
is about 1 MB (three inlined PodSpecs) and no package ships it; its "minimal" variant preserves
unknown fields, so it checks nothing. The SDK's model classes are generated from KServe's OpenAPI
spec of the same Go types that controller-gen turns into the CRD's openAPIV3Schema: the same
fields, names and nesting. Each class's `openapi_types` and `attribute_map` become one JSON Schema
object with `additionalProperties: false` (a strict check, as `kubectl apply --validate=strict`),
its `required` from the setters that refuse None. Kubernetes types (V1Container, V1Probe…) are
`$ref`s into the Kubernetes 1.30 strict definitions of kubernetes-validate, resolved by the test.

The classes are read with `ast` from the wheel (kserve itself is never imported or installed).
`status` is left open (the manifests never write it); `metadata` is the Kubernetes ObjectMeta.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

from tests.deploy.k8s_schema import K8S_DEFINITIONS_ID, k8s_definitions

OUT = Path(__file__).parent / "golden" / "kserve-0.14.1-inferenceservice-v1beta1.schema.json"
ROOT = "V1beta1InferenceService"
KSERVE_PREFIXES = ("V1beta1", "V1alpha1", "Knative", "Net")
SPECIAL = {
    "ResourceQuantity": "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "V1Time": "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "V1ObjectMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
}
PRIMITIVES = {"str": {"type": "string"}, "int": {"type": "integer"},
              "bool": {"type": "boolean"}, "float": {"type": "number"}, "object": {}}


def read_models(wheel: Path) -> dict[str, tuple[dict[str, str], dict[str, str], set[str]]]:
    """{class name: (openapi_types, attribute_map, required python names)} of kserve/models."""
    models = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not re.match(r"^kserve/models/[a-z0-9_]+\.py$", member):
                continue
            source = archive.read(member).decode()
            for node in ast.parse(source).body:
                if not isinstance(node, ast.ClassDef):
                    continue
                tables = {}
                for item in node.body:
                    if (isinstance(item, ast.Assign) and len(item.targets) == 1
                            and isinstance(item.targets[0], ast.Name)
                            and item.targets[0].id in ("openapi_types", "attribute_map")):
                        tables[item.targets[0].id] = ast.literal_eval(item.value)
                if len(tables) == 2:
                    required = set(re.findall(r"Invalid value for `(\w+)`, must not be `None`",
                                              source))
                    models[node.name] = (tables["openapi_types"], tables["attribute_map"],
                                         required)
    return models


def k8s_name(type_name: str, definitions: dict) -> str:
    if type_name in SPECIAL:
        return SPECIAL[type_name]
    match = re.match(r"^K8sIoApi(\w+?)V1(\w+)$", type_name)
    if match:
        return f"io.k8s.api.{match[1].lower()}.v1.{match[2]}"
    match = re.match(r"^V(\d)(\w+)$", type_name)
    if not match:
        raise SystemExit(f"cannot map {type_name} to a Kubernetes definition")
    suffix = f".v{match[1]}.{match[2]}"
    for preferred in ("io.k8s.api.core", "io.k8s.apimachinery.pkg.apis.meta"):
        if preferred + suffix in definitions:
            return preferred + suffix
    found = [key for key in definitions if key.endswith(suffix)]
    if len(found) != 1:
        raise SystemExit(f"{type_name}: {len(found)} Kubernetes definitions end with {suffix}")
    return found[0]


def build(wheel: Path) -> dict:
    models = read_models(wheel)
    definitions = k8s_definitions()
    out: dict[str, dict] = {}
    pending = [ROOT]

    def schema_of(type_name: str) -> dict:
        if type_name in PRIMITIVES:
            return dict(PRIMITIVES[type_name])
        match = re.match(r"^list\[(.+)\]$", type_name)
        if match:
            return {"type": "array", "items": schema_of(match[1])}
        match = re.match(r"^dict\(str, (.+)\)$", type_name)
        if match:
            return {"type": "object", "additionalProperties": schema_of(match[1])}
        if type_name.startswith(KSERVE_PREFIXES) and type_name in models:
            pending.append(type_name)
            return {"$ref": f"#/$defs/{type_name}"}
        name = k8s_name(type_name, definitions)
        if name not in definitions:
            raise SystemExit(f"{type_name} -> {name}: not a Kubernetes 1.30 definition")
        return {"$ref": f"{K8S_DEFINITIONS_ID}#/$defs/{name}"}

    while pending:
        name = pending.pop()
        if name in out:
            continue
        types, keys, required = models[name]
        properties = {}
        for attribute, type_name in types.items():
            if name == ROOT and attribute == "status":
                properties[keys[attribute]] = {"type": "object"}
            else:
                properties[keys[attribute]] = schema_of(type_name)
        out[name] = {"type": "object", "additionalProperties": False, "properties": properties}
        if required:
            out[name]["required"] = sorted(keys[r] for r in required)
    root = out[ROOT]
    root["properties"]["apiVersion"] = {"const": "serving.kserve.io/v1beta1"}
    root["properties"]["kind"] = {"const": "InferenceService"}
    root["required"] = sorted({*root.get("required", []), "apiVersion", "kind", "spec"})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://attndeploy.invalid/kserve-0.14.1-inferenceservice-v1beta1.schema.json",
        "$comment": ("KServe 0.14.1 InferenceService (serving.kserve.io/v1beta1), strict. Made by "
                     "tests/deploy/make_kserve_schema.py from the models of the kserve 0.14.1 "
                     "Python SDK (PyPI), generated from KServe's OpenAPI spec of the Go types "
                     "behind the CRD; Kubernetes types refer to kubernetes-validate's 1.30 "
                     "strict definitions."),
        "$ref": f"#/$defs/{ROOT}",
        "$defs": dict(sorted(out.items())),
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    OUT.write_text(json.dumps(build(Path(argv[0])), indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
