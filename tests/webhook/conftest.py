"""Admission reviews through kopf's own admission engine, as the operator's webhook server runs them."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import kopf
import pytest
from kopf._cogs.structs import ephemera, references
from kopf._core.engines import admission
from kopf._core.engines.indexing import OperatorIndexers
from kopf._core.reactor.inventory import ResourceMemories
from lockstep.operator.webhooks import register_webhooks
from prometheus_client import CollectorRegistry, Counter

PODS = references.Resource(group="", version="v1", plural="pods", kind="Pod", singular="pod",
                           namespaced=True, verbs=["create", "get", "list", "watch", "patch"])


@dataclass
class Config:
    """The fields of the operator's OperatorConfig that the webhook reads."""

    sidecar_image: str = "ghcr.io/lockstep-dev/lockstep:0.1.0"
    sidecar_resources: dict[str, Any] = field(default_factory=lambda: {
        "requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}})
    report_url: str = "https://lockstep.lockstep-system.svc:8443"
    operator_ca_path: str = ""
    token_expiration_seconds: int = 900
    own_namespace: str = "lockstep-system"
    allow_opt_out: tuple[str, ...] = ()


def admission_review(pod: Mapping[str, Any], namespace: str, *, operation: str = "CREATE",
                     dry_run: bool = False, old: Mapping[str, Any] | None = None,
                     sub_resource: str | None = None) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it for a pod creation (or an UPDATE with ``old``,
    or a change of the ``ephemeralcontainers`` subresource)."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": "3e1a8f2c-0000-4000-8000-000000000001",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": copy.deepcopy(dict(pod)),
            "oldObject": copy.deepcopy(dict(old)) if old is not None else None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    if sub_resource:
        review["request"]["subResource"] = sub_resource
    return review


@dataclass
class Admitted:
    response: dict[str, Any]
    ops: list[dict[str, Any]]
    pod: dict[str, Any]


Admit = Callable[..., Awaitable[Admitted]]


@pytest.fixture
def interfaces() -> list[dict[str, Any]]:
    """The MCPServerInterfaces the webhook's lookup returns; tests append to it."""
    return []


@pytest.fixture
def events() -> list[tuple[dict[str, Any], str, str]]:
    return []


@pytest.fixture
def operator_ca() -> str:
    return "-----BEGIN CERTIFICATE-----\nMIIBnotreal\n-----END CERTIFICATE-----\n"


@pytest.fixture
def config(tmp_path: Any, operator_ca: str) -> Config:
    ca = tmp_path / "ca.crt"
    ca.write_text(operator_ca)
    return Config(operator_ca_path=str(ca))


@dataclass
class WebhookMetrics:
    """The operator's webhook counter, in a registry of its own."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.webhook_requests = Counter("lockstep_webhook_requests", "Admission requests handled.",
                                        ["webhook", "outcome"], registry=self.registry)

    def count(self, outcome: str) -> float:
        value = self.registry.get_sample_value("lockstep_webhook_requests_total",
                                               {"webhook": "mutate", "outcome": outcome})
        return float(value or 0.0)


@pytest.fixture
def webhook_metrics() -> WebhookMetrics:
    return WebhookMetrics()


@pytest.fixture
def admit(config: Config, interfaces: list[dict[str, Any]], events: list[tuple[dict[str, Any], str, str]],
          webhook_metrics: WebhookMetrics) -> Admit:
    registry = kopf.OperatorRegistry()
    lookups: list[str] = []

    async def lookup(namespace: str) -> Sequence[Mapping[str, Any]]:
        lookups.append(namespace)
        return [item for item in interfaces if item["metadata"]["namespace"] == namespace]

    register_webhooks(registry, config, lookup=lookup, metrics=webhook_metrics,
                      post_event=lambda target, reason, message: events.append((target, reason, message)))
    insights = references.Insights()
    insights.webhook_resources.add(PODS)

    async def send(pod: Mapping[str, Any], namespace: str = "agents", webhook: str = "mutate-pods",
                   **options: Any) -> Admitted:
        review = admission_review(pod, namespace, **options)
        response = await admission.serve_admission_request(
            review, webhook=webhook, settings=kopf.OperatorSettings(), memories=ResourceMemories(),
            memobase=ephemera.Memo(), registry=registry, insights=insights, indices=OperatorIndexers().indices)
        assert response["response"]["uid"] == review["request"]["uid"]
        raw = response["response"].get("patch")
        ops = json.loads(base64.b64decode(raw)) if raw else []
        if raw:
            assert response["response"]["patchType"] == "JSONPatch"
        return Admitted(dict(response), ops, jsonpatch.apply_patch(review["request"]["object"], ops))

    return send
