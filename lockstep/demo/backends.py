"""Where ``lockstep demo`` runs: a real control plane with the kubelet stand-in (RealBackend), or the kmock
emulation (EmulatedBackend). Both run the real operator, the example MCP server and the real sidecar; the
story (story.py) talks to either through the same methods."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from lockstep.core.names import CONDITION_TYPE
from lockstep.demo.control_plane import assets_folder, free_port
from lockstep.demo.narrator import LOCKSTEP, Narrator

__all__ = ["GATE", "NAMESPACE", "Backend", "EmulatedBackend", "RealBackend", "pod_condition", "weather_pod",
           "weather_server_argv"]

NAMESPACE = "agents"
GATE = CONDITION_TYPE


def weather_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "weather-0", "namespace": NAMESPACE, "labels": {"app": "weather"}},
            "spec": {"containers": [{"name": "server", "image": "example.com/weather-mcp:1.0",
                                     "ports": [{"name": "mcp", "containerPort": 8080}]}]}}


def weather_server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "lockstep.demo.weather_server", "--port", str(port)]


class RealBackend:
    """kube-apiserver + etcd + kube-controller-manager; the kubelet stand-in runs the pod's processes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stack = contextlib.AsyncExitStack()

    def describe(self) -> str:
        return (f"a real control plane: kube-apiserver, etcd and kube-controller-manager from "
                f"KUBEBUILDER_ASSETS={os.environ.get('KUBEBUILDER_ASSETS')}")

    async def start(self, narrator: Narrator) -> None:
        from lockstep.demo.control_plane import start_control_plane
        from lockstep.demo.install import apply, install_lockstep
        from lockstep.demo.kubelet import Kubelet

        narrator.say("starting the control plane (etcd, kube-apiserver, kube-controller-manager)")
        assets = assets_folder()
        assert assets is not None
        self.plane = self.stack.enter_context(start_control_plane(self.folder / "control-plane", assets))
        narrator.say(f"API server ready at {self.plane.server}; installing Lockstep as the chart does "
                     "(CRD, RBAC, operator under its ServiceAccount, webhooks)")
        self.lockstep = await self.stack.enter_async_context(install_lockstep(self.plane, self.folder / "lockstep"))
        self.kubelet = await self.stack.enter_async_context(Kubelet(self.plane, self.folder / "node").running())
        apply(self.plane, {"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": NAMESPACE, "labels": {"lockstep.dev/inject": "enabled"}}})
        apply(self.plane, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "weather", "namespace": NAMESPACE},
                           "spec": {"selector": {"app": "weather"},
                                    # Isolate: agents reach the pod through the sidecar's in-line proxy only
                                    "ports": [{"port": 80, "targetPort": "lockstep-mcp"}]}})
        await narrator.until("namespace agents ready (its default ServiceAccount)", self._has_account)

    def _has_account(self) -> bool:
        from lockstep.demo.control_plane import ControlPlaneError

        with contextlib.suppress(ControlPlaneError):
            self.plane.call("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
            return True
        return False

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.lockstep.operator.metrics_port}/metrics"

    async def apply(self, body: dict[str, Any]) -> None:
        from lockstep.demo.install import apply

        apply(self.plane, body)

    async def apply_policy(self, body: dict[str, Any]) -> None:
        """An MCPApprovalPolicy, as a cluster administrator applies it."""
        from lockstep.demo.install import apply

        apply(self.plane, body)

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        from lockstep.demo.install import apply

        return apply(self.plane, pod)

    async def run_pod(self, name: str, port: int) -> Callable[[], None]:
        from lockstep.demo.kubelet import PodProcess

        self.running = await self.kubelet.start_pod(NAMESPACE, name, {"server": PodProcess(weather_server_argv(port))},
                                                    mcp_port=port)
        server = self.running.processes["server"]
        return lambda: server.send_signal(signal.SIGUSR1)

    def pod(self, name: str) -> dict[str, Any]:
        return dict(self.plane.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"))

    def in_service(self, name: str) -> bool | None:
        slices = self.plane.call("GET", f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"
                                        "?labelSelector=kubernetes.io%2Fservice-name%3Dweather")
        for item in slices["items"]:
            for endpoint in item.get("endpoints") or []:
                if self.running.ip in endpoint.get("addresses", []):
                    return bool((endpoint.get("conditions") or {}).get("ready"))
        return None

    def service_note(self) -> str:
        return "the EndpointSlice controller"

    @property
    def proxy_port(self) -> int | None:
        """Where the pod's in-line proxy listens here (the kubelet stand-in gives each pod a free port: the
        pods share the host's loopback, and 8090 may be taken on this machine)."""
        return self.running.proxy_port

    @property
    def local_ip(self) -> str:
        """The pod's IP as its sidecar sees it (the stand-in's loopback alias of the pod)."""
        return self.running.local_ip

    def events(self, name: str) -> list[dict[str, Any]]:
        items = self.plane.call("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
        return [event for event in items if event["involvedObject"].get("name") == name]

    async def stop(self) -> None:
        await self.stack.aclose()


class EmulatedBackend:
    """kmock as the API server. It has no kubelet and no EndpointSlice controller: the demo runs the
    pod's processes and reads Service membership as the EndpointSlice rule would (Ready, which the
    kubelet computes from the containers and the readiness gate)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stack = contextlib.AsyncExitStack()
        self.processes: list[asyncio.subprocess.Process] = []
        self.proxy_port: int | None = None
        #: The pod's IP as its sidecar sees it (downward API status.podIP): a loopback alias of the pod's own.
        self.local_ip = "127.1.0.1"

    def describe(self) -> str:
        return "the kmock emulation of the Kubernetes API (set KUBEBUILDER_ASSETS for a real control plane)"

    async def start(self, narrator: Narrator) -> None:
        import kmock

        from lockstep.demo.cluster import lockstep_cluster
        from lockstep.demo.emulator import Emulator

        narrator.say("starting the emulated API server and Lockstep (operator, report endpoint, webhooks)")
        self.emulator = await self.stack.enter_async_context(Emulator())
        await self.stack.enter_async_context(kmock.Server(self.emulator))
        self.cluster = await self.stack.enter_async_context(lockstep_cluster(self.emulator, self.folder))
        self._kubeconfig = self.folder / "kubeconfig"
        self._kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
            "clusters": [{"name": "kmock", "cluster": {"server": str(self.emulator.url).rstrip("/")}}],
            "users": [{"name": "kmock", "user": {}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock", "namespace": NAMESPACE}}]}))

    @property
    def kubeconfig(self) -> Path:
        return self._kubeconfig

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.cluster.operator.metrics_port}/metrics"

    async def apply(self, body: dict[str, Any]) -> None:
        body = copy.deepcopy(body)  # kmock adds no uid, generation or resourceVersion
        body["metadata"].update(uid="uid-" + body["metadata"]["name"], generation=1, resourceVersion="1")
        await self.cluster.create(f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces", body)

    async def apply_policy(self, body: dict[str, Any]) -> None:
        body = copy.deepcopy(body)
        body["metadata"].update(uid="uid-" + body["metadata"]["name"], generation=1, resourceVersion="1")
        await self.cluster.create("/apis/lockstep.dev/v1alpha1/mcpapprovalpolicies", body)

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        admitted = await self.cluster.admit(pod)  # the webhook over HTTPS, as kube-apiserver calls it
        admitted["metadata"].update(uid="uid-" + pod["metadata"]["name"], resourceVersion="1")
        admitted["status"] = {"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"}]}
        await self.cluster.create(f"/api/v1/namespaces/{NAMESPACE}/pods", admitted)
        return admitted

    async def run_pod(self, name: str, port: int) -> Callable[[], None]:
        pod = self.cluster.pod(name)
        server = await asyncio.create_subprocess_exec(*weather_server_argv(port), stdout=asyncio.subprocess.DEVNULL,
                                                      stderr=asyncio.subprocess.DEVNULL)
        self.processes.append(server)
        [sidecar] = [c for c in pod["spec"]["initContainers"] if c["name"] == "lockstep-sidecar"]
        token = self.folder / f"{name}.token"
        token.write_text(self.cluster.tokens.issue(NAMESPACE, name, pod["metadata"]["uid"]))
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")},
               **{item["name"]: item.get("value", "") for item in sidecar["env"]},
               "LOCKSTEP_TOKEN_PATH": str(token), "LOCKSTEP_SIDECAR_PORT": str(free_port()),
               "LOCKSTEP_MCP_PORT": str(port)}
        if env.get("LOCKSTEP_PROXY_PORT"):  # the in-line proxy (lockstep-mcp): 8090 may be taken here
            self.proxy_port = free_port()
            env["LOCKSTEP_PROXY_PORT"] = str(self.proxy_port)
        if any("valueFrom" in item for item in sidecar["env"] if item["name"] == "LOCKSTEP_POD_IP"):
            env["LOCKSTEP_POD_IP"] = self.local_ip  # the downward API's status.podIP
        log = (self.folder / "sidecar.log").open("wb")
        self.processes.append(await asyncio.create_subprocess_exec(*LOCKSTEP, "sidecar", env=env, stdout=log,
                                                                   stderr=asyncio.subprocess.STDOUT))
        log.close()
        return lambda: server.send_signal(signal.SIGUSR1)

    def pod(self, name: str) -> dict[str, Any]:
        return self.cluster.pod(name)

    def in_service(self, name: str) -> bool | None:
        # The kubelet's rule (Ready = containers ready AND every readiness gate True) and the
        # EndpointSlice controller's (ready endpoints are Ready pods), applied to the emulated pod.
        gate = pod_condition(self.pod(name), GATE)
        return gate is not None and gate["status"] == "True"

    def service_note(self) -> str:
        return "the EndpointSlice rule (emulated API: no controller)"

    def events(self, name: str) -> list[dict[str, Any]]:
        import kmock

        return [request.data for request in self.emulator["post", kmock.resource("v1/events")]
                if request.data.get("involvedObject", {}).get("name") == name]

    async def stop(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.terminate()
                await process.wait()
        await self.stack.aclose()


def pod_condition(pod: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for entry in (pod.get("status") or {}).get("conditions") or []:
        if entry["type"] == type_:
            return dict(entry)
    return None



Backend = RealBackend | EmulatedBackend
