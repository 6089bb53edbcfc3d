"""A whole Lockstep installation without a cluster: the kmock emulation as the API server, the real operator
(kopf, report endpoint, webhook server) on its own thread, pods admitted through the webhook over HTTPS.
``lockstep demo --backend emulated`` runs on it, and so do end-to-end tests and benches."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import jsonpatch
import kmock

from lockstep.core.names import CONDITION_TYPE
from lockstep.demo.certificates import Certificates, make_certificates
from lockstep.demo.control_plane import free_port
from lockstep.demo.emulator import Emulator, TokenBook, declare_resources
from lockstep.demo.operator_thread import RunningOperator, run_operator
from lockstep.operator.config import OperatorConfig
from lockstep.sidecar.settings import SidecarSettings

__all__ = ["GATE", "NAMESPACE", "Cluster", "lockstep_cluster", "loopback_operator_config"]

NAMESPACE = "agents"
GATE = CONDITION_TYPE


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
        if answer["allowed"] is not True:
            raise RuntimeError(f"the webhook refused pod {pod['metadata']['name']}: {answer}")
        ops = json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
        return dict(jsonpatch.apply_patch(pod, ops))

    async def create(self, path: str, body: dict[str, Any]) -> None:
        async with self.api.post(path, json=body) as response:
            if response.status >= 300:
                raise RuntimeError(f"POST {path}: HTTP {response.status} {await response.text()}")

    def pod(self, name: str) -> dict[str, Any]:
        return dict(self.api.objects["v1/pods", NAMESPACE, name])

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [request.data for request in self.api["post", kmock.resource("v1/events")]
                if request.data.get("reason") == reason]


@contextlib.asynccontextmanager
async def lockstep_cluster(emulator: Emulator, folder: Path) -> AsyncIterator[Cluster]:
    """Run the operator against ``emulator`` with TLS material in ``folder``."""
    declare_resources(emulator)
    tokens = TokenBook(emulator)
    config, certificates = loopback_operator_config(folder, stale_check_interval=0.2, status_flush_interval=0.1,
                                                    status_write_interval=0.0)
    async with run_operator(emulator, config) as running:
        yield Cluster(emulator, tokens, running, config, certificates,
                      f"https://127.0.0.1:{config.webhook_port}/mutate-pods")


def loopback_operator_config(folder: Path, **overrides: Any) -> tuple[OperatorConfig, Certificates]:
    """The operator's settings for a run on loopback (report endpoint, webhooks and metrics on free ports,
    TLS from a CA written into ``folder``), as the chart would set them in a cluster."""
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
