"""A whole Lockstep installation without a cluster, for end-to-end tests and benches: kmock as the
API server, the real operator (kopf, report endpoint, webhook server) on its own thread, pods admitted
through the webhook over HTTPS and their sidecars run in-process with the environment it injected."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import jsonpatch
import kmock
from lockstep.operator.config import OperatorConfig
from lockstep.sidecar.app import RunningSidecar, running_sidecar
from lockstep.sidecar.settings import SidecarSettings

from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision
from lockstep_testing.kmock_support import (
    Emulator,
    RunningOperator,
    TokenBook,
    condition_of,
    declare_resources,
    run_operator,
)
from lockstep_testing.loopback import Certificates, McpServerHandle, make_certificates

__all__ = ["GATE", "NAMESPACE", "Cluster", "application_pod", "interface_resource", "lockstep_cluster",
           "loopback_operator_config", "start_pod", "verified"]

NAMESPACE = "agents"
GATE = "lockstep.dev/interface-verified"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    api: Emulator
    tokens: TokenBook
    operator: RunningOperator
    config: OperatorConfig
    certificates: Certificates
    webhook_url: str

    async def admit(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Send the pod through the operator's webhook server over HTTPS, as kube-apiserver does."""
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"], "namespace": NAMESPACE, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}
        verify = SidecarSettings.from_env({"LOCKSTEP_OPERATOR_URL": "https://x",
                                           "LOCKSTEP_OPERATOR_CA": self.certificates.ca_pem}).ssl_context()
        async with httpx2.AsyncClient(verify=verify) as client:
            answer = (await client.post(self.webhook_url, json=review)).json()["response"]
        assert answer["allowed"] is True, answer
        ops = json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
        return dict(jsonpatch.apply_patch(pod, ops))

    async def create(self, path: str, body: dict[str, Any]) -> None:
        async with self.api.post(path, json=body) as response:
            assert response.status < 300, await response.text()

    def pod(self, name: str) -> dict[str, Any]:
        return dict(self.api.objects["v1/pods", NAMESPACE, name])

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [request.data for request in self.api["post", kmock.resource("v1/events")]
                if request.data.get("reason") == reason]


def interface_resource(revision: Revision, mcp: McpServerHandle) -> dict[str, Any]:
    manifest = build_manifest(revision, name="weather", namespace=NAMESPACE, selector={"app": "weather"},
                              endpoint={"port": mcp.port, "path": "/mcp", "transport": "streamable-http"})
    manifest["metadata"].update({"uid": "uid-weather", "generation": 1})
    manifest["spec"]["probe"] = {"interval": "60s", "timeout": "5s", "staleAfter": "180s"}
    return manifest


def application_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "weather"}},
            "spec": {"containers": [{"name": "server", "image": "example.com/weather-mcp:1.4"}]}}


@contextlib.asynccontextmanager
async def start_pod(cluster: Cluster, pod: dict[str, Any], tmp_path: Path) -> AsyncIterator[RunningSidecar]:
    """What the API server and the kubelet do with the admitted pod: store it, start its sidecar
    with the environment the webhook wrote (its own and its proxy's port free ones: the pods share the
    host's loopback) and a pod-bound token in the projected volume."""
    name, uid = pod["metadata"]["name"], f"uid-{pod['metadata']['name']}"
    pod["metadata"].update({"uid": uid, "resourceVersion": "1"})
    pod["status"] = {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"}]}
    await cluster.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    token = tmp_path / f"{name}.token"
    token.write_text(cluster.tokens.issue(NAMESPACE, name, uid))
    [sidecar] = [c for c in pod["spec"]["initContainers"] if c["name"] == "lockstep-sidecar"]
    env = {variable["name"]: variable.get("value", "") for variable in sidecar["env"]}
    env.update({"LOCKSTEP_TOKEN_PATH": str(token), "LOCKSTEP_SIDECAR_PORT": "0"})  # the mount; a free port
    if env.get("LOCKSTEP_PROXY_PORT"):  # the in-line proxy (Isolate, Quarantine): 8090 may be taken on this host
        env["LOCKSTEP_PROXY_PORT"] = str(free_port())
    async with running_sidecar(SidecarSettings.from_env(env), host="127.0.0.1") as running:
        yield running


def verified(cluster: Cluster, name: str) -> str | None:
    condition = condition_of(cluster.pod(name), GATE)
    return condition["status"] if condition else None


@contextlib.asynccontextmanager
async def lockstep_cluster(kmock: Emulator, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Run the operator against ``kmock`` with TLS material in ``tmp_path``."""
    declare_resources(kmock)
    tokens = TokenBook(kmock)
    config, certificates = loopback_operator_config(tmp_path, stale_check_interval=0.2, status_flush_interval=0.1,
                                                           status_write_interval=0.0)
    async with run_operator(kmock, config) as running:
        yield Cluster(kmock, tokens, running, config, certificates,
                      f"https://127.0.0.1:{config.webhook_port}/mutate-pods")


def loopback_operator_config(folder: Path, **overrides: Any) -> tuple[OperatorConfig, Certificates]:
    """The operator's settings for a run on loopback (report endpoint, webhooks and metrics on free ports,
    TLS from a test CA written into ``folder``), as the chart would set them in a cluster."""
    certificates = make_certificates(folder)
    (folder / "ca.crt").write_text(certificates.ca_pem)
    report_port = free_port()
    settings: dict[str, Any] = {
        "report_host": "127.0.0.1", "report_port": report_port, "tls_cert_path": str(certificates.cert_file),
        "tls_key_path": str(certificates.key_file), "metrics_host": "127.0.0.1", "metrics_port": 0,
        "health_port": 0, "webhook_port": free_port(), "rate_per_pod": 50.0, "rate_burst": 50,
        "sidecar_image": "ghcr.io/lockstep-dev/lockstep:test", "report_url": f"https://127.0.0.1:{report_port}",
        "operator_ca_path": str(folder / "ca.crt"), "token_expiration_seconds": 900,
        "own_namespace": "lockstep-system"}
    return OperatorConfig(**{**settings, **overrides}), certificates
