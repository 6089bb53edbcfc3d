"""AdmissionReviews of an MCPServerInterface, sent through kopf's admission engine as the operator's webhook server
does (the validating webhook's tests, and the signed-approval ones)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

import kopf
from kopf._cogs.structs import ephemera, references
from kopf._core.engines import admission
from kopf._core.engines.indexing import OperatorIndexers
from kopf._core.reactor.inventory import ResourceMemories
from lockstep_testing.interfaces import WEATHER

from lockstep.core import Interface
from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision

__all__ = ["manifest", "refusal", "review", "sender"]

INTERFACES = references.Resource(group="lockstep.dev", version="v1alpha1", plural="mcpserverinterfaces",
                                 kind="MCPServerInterface", singular="mcpserverinterface", namespaced=True,
                                 verbs=["create", "get", "list", "watch", "patch", "update"],
                                 subresources=["status"])


def manifest(document: Mapping[str, Any] = WEATHER, **spec: Any) -> dict[str, Any]:
    built = build_manifest(Revision.of(Interface.from_document(document)), name="weather", namespace="agents",
                           selector={"app": "weather-mcp"})
    built["spec"].update(spec)
    return built


def review(obj: Mapping[str, Any], *, operation: str = "CREATE", old: Mapping[str, Any] | None = None,
           subresource: str | None = None) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it for an MCPServerInterface."""
    gvk = {"group": "lockstep.dev", "version": "v1alpha1", "kind": "MCPServerInterface"}
    gvr = {"group": "lockstep.dev", "version": "v1alpha1", "resource": "mcpserverinterfaces"}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"], "operation": operation,
        "userInfo": {"username": "system:serviceaccount:argocd:argocd-application-controller",
                     "uid": "0b7e3f9a-0000-4000-8000-000000000002",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"]},
        "object": copy.deepcopy(dict(obj)), "oldObject": copy.deepcopy(dict(old)) if old else None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1",
                    "kind": "CreateOptions" if operation == "CREATE" else "UpdateOptions"},
    }
    if subresource:
        request["subResource"] = subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def sender(registry: kopf.OperatorRegistry) -> Any:
    """Send AdmissionReviews through kopf's admission engine, as the operator's webhook server does."""
    insights = references.Insights()
    insights.webhook_resources.add(INTERFACES)

    async def send(obj: Mapping[str, Any], **options: Any) -> dict[str, Any]:
        sent = review(obj, **options)
        answer = await admission.serve_admission_request(
            sent, webhook="validate-mcpserverinterfaces", settings=kopf.OperatorSettings(),
            memories=ResourceMemories(), memobase=ephemera.Memo(), registry=registry, insights=insights,
            indices=OperatorIndexers().indices)
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == sent["request"]["uid"]
        return dict(answer["response"])

    return send


def refusal(response: Mapping[str, Any]) -> str:
    assert response["allowed"] is False, response
    assert response["status"]["code"] == 422
    return str(response["status"]["message"])
