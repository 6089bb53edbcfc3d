"""Validate rendered Kubernetes objects: built-in kinds against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail), custom resources against their CRD's
openAPIV3Schema, and prometheus-operator / cert-manager resources against JSON schemas kept in
tests/chart/schemas/. Those were written by model_json_schema() of the cloudcoil model packages on
PyPI (generated from those projects' CRDs; each file's $comment names the version); the packages are
not test dependencies because cloudcoil registers a pytest plugin that needs a cluster toolchain.
Every object that lists its fields is closed, so an unknown field fails as in the API server's strict mode.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

__all__ = ["KUBERNETES_VERSIONS", "SchemaViolation", "crd_schemas", "validate_object"]

#: The oldest Kubernetes the chart supports (native sidecars) and the newest schema shipped.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


class SchemaViolation(AssertionError):
    """A rendered object that its schema refuses."""


def crd_schemas(paths: Iterable[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD version in these files."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


VENDORED_SCHEMAS = Path(__file__).resolve().parents[1] / "chart" / "schemas"


@cache
def _model_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    path = VENDORED_SCHEMAS / f"{api_version.replace('/', '_')}_{kind}.json"
    if not path.exists():
        return None
    schema: dict[str, Any] = json.loads(path.read_text())
    _close_objects(schema)
    return schema


def _close_objects(node: Any) -> None:
    """Refuse unknown fields wherever the schema lists the fields (as the API server's strict mode does)."""
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for child in node.values():
            _close_objects(child)
    elif isinstance(node, list):
        for child in node:
            _close_objects(child)


def _crd_object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD schema as plain JSON Schema: apiVersion, kind and metadata are the API server's business."""
    schema = copy.deepcopy(schema)
    schema.setdefault("properties", {}).update(
        apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
    return _strip_kubernetes_extensions(schema)


def _strip_kubernetes_extensions(node: Any) -> Any:
    if isinstance(node, dict):
        cleaned = {k: _strip_kubernetes_extensions(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if node.get("x-kubernetes-int-or-string"):
            cleaned.pop("type", None)
            cleaned["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.get("x-kubernetes-preserve-unknown-fields"):
            cleaned.pop("additionalProperties", None)
        elif cleaned.get("type") == "object" and "properties" in cleaned:
            cleaned.setdefault("additionalProperties", False)
        return cleaned
    if isinstance(node, list):
        return [_strip_kubernetes_extensions(v) for v in node]
    return node


def validate_object(obj: dict[str, Any], crds: dict[tuple[str, str], dict[str, Any]],
                    kubernetes_version: str = KUBERNETES_VERSIONS[0]) -> str:
    """Validate one object; returns which schema was used. Raises SchemaViolation."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    where = f"{kind} {obj.get('metadata', {}).get('name')}"
    if (api_version, kind) in crds:
        _check(jsonschema.Draft7Validator(_crd_object_schema(crds[(api_version, kind)])), obj, where)
        return "crd"
    model_schema = _model_schema(api_version, kind)
    if model_schema is not None:
        _check(jsonschema.Draft202012Validator(model_schema), obj, where)
        return "vendored"
    try:
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = "/".join(str(p) for p in error.path)
        raise SchemaViolation(f"{where} at /{path}: {error.message}") from None
    return "kubernetes"


def _check(validator: jsonschema.protocols.Validator, obj: dict[str, Any], where: str) -> None:
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.path)
        raise SchemaViolation(f"{where} at /{path}: {first.message}")
