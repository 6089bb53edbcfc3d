"""A whole Lockstep installation without a cluster, for end-to-end tests and benches: the demo's
(lockstep/demo/cluster.py: kmock as the API server, the real operator on its own thread, pods admitted through
the webhook over HTTPS), and here the pods' sidecars run in-process with the environment it injected."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lockstep.core.manifest import build_manifest
from lockstep.core.revision import Revision
from lockstep.demo.cluster import GATE, NAMESPACE, Cluster, lockstep_cluster, loopback_operator_config
from lockstep.demo.control_plane import free_port
from lockstep.sidecar.app import RunningSidecar, running_sidecar
from lockstep.sidecar.settings import SidecarSettings
from lockstep_testing.kmock_support import condition_of
from lockstep_testing.loopback import McpServerHandle

__all__ = ["GATE", "NAMESPACE", "Cluster", "application_pod", "interface_resource", "lockstep_cluster",
           "loopback_operator_config", "start_pod", "verified"]


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
