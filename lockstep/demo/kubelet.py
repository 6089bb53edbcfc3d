"""A kubelet stand-in for the real control plane (control_plane.py has no kubelet, scheduler or runtime).
It plays the kubelet's part and no other; each step names the Kubernetes rule it mirrors:

* a Node that is Ready, with its Lease in ``kube-node-lease`` renewed (node heartbeats);
* ``pods/binding`` of a pod to that Node (what the scheduler would do, so that a pod has a node);
* a pod IP and container statuses in ``status``;
* the pod's processes run as local processes: the MCP server as the caller says, and the injected
  Lockstep sidecar as ``lockstep sidecar`` with the environment of its container spec and a token from
  the TokenRequest API bound to the pod with the audience of its projected volume (the pods share the
  host's loopback: the sidecar's own port and its in-line proxy's port are free ports per pod,
  ``RunningPod.sidecar_port`` and ``RunningPod.proxy_port``, and the downward API's ``status.podIP`` is a
  loopback alias of the pod's own, ``RunningPod.local_ip``, where only a server that listens on every
  address answers);
* ``Ready`` computed as the kubelet does: every container ready AND every readiness gate's condition True
  (kubelet's status manager, ``GeneratePodReadyCondition``);
* the final delete of a terminating pod (``gracePeriodSeconds: 0``) once its processes are stopped.

The EndpointSlice controller in kube-controller-manager then really adds and removes the pod from its
Services as Ready changes. Part of the product (``lockstep demo --backend real``) that the tests also use.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from lockstep.demo.control_plane import ControlPlane, free_port

from lockstep.core.names import CONDITION_TYPE, SIDECAR_NAME

__all__ = ["SIDECAR", "Kubelet", "PodProcess", "RunningPod"]

SIDECAR = SIDECAR_NAME
GATE = CONDITION_TYPE
LEASE_SECONDS = 40
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class PodProcess:
    """What a container of the pod runs here: argv and extra environment (the image is not pulled)."""

    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RunningPod:
    namespace: str
    name: str
    uid: str
    ip: str
    folder: Path
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    #: Containers whose process the caller runs itself (an MCP server inside the test), with liveness.
    external: dict[str, bool] = field(default_factory=dict)
    sidecar_port: int | None = None
    #: The address that plays the pod's IP for its own processes: the downward API's ``status.podIP`` as the
    #: containers see it (``ip`` is what the API publishes, but nothing on this host answers there). A loopback
    #: alias of the pod's own: a server that listens on every address answers on it, one on 127.0.0.1 does not.
    local_ip: str = ""
    #: Where the sidecar's in-line proxy (container port ``lockstep-mcp``, enforcement Isolate and Quarantine)
    #: really listens here: a free port per pod, as the pods share the host's loopback (None: no proxy).
    proxy_port: int | None = None

    def alive(self, container: str) -> bool:
        if container in self.external:
            return self.external[container]
        process = self.processes.get(container)
        return process is not None and process.returncode is None

    def log(self, container: str) -> str:
        path = self.folder / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, plane: ControlPlane, folder: Path, *, node: str = "lockstep-node-1") -> None:
        self.plane = plane
        self.folder = folder
        self.node = node
        self.pods: dict[tuple[str, str], RunningPod] = {}
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._next_ip = 10

    # ---------------------------------------------------------------- API access
    async def _call(self, method: str, path: str, body: Any = None, *,
                    content_type: str = "application/json") -> Any:
        assert self._session is not None, "use `async with kubelet.running()`"
        data = json.dumps(body) if body is not None else None
        async with self._session.request(method, self.plane.server + path, data=data,
                                         headers={"Content-Type": content_type}) as response:
            text = await response.text()
            if response.status >= 400:
                raise RuntimeError(f"kubelet stand-in: {method} {path}: HTTP {response.status}: {text[:300]}")
            return json.loads(text) if text else None

    # ---------------------------------------------------------------- node
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Kubelet]:
        context: ssl.SSLContext = self.plane.ssl_context()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            self._session = session
            await self._register_node()
            self._tasks = [asyncio.create_task(self._renew_lease()), asyncio.create_task(self._watch_pods())]
            try:
                yield self
            finally:
                for task in self._tasks:
                    task.cancel()
                for task in self._tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                for pod in list(self.pods.values()):
                    await self._kill(pod)
                self._session = None

    async def _register_node(self) -> None:
        # A Node the kubelet registers, with a Ready condition (node status) and an address.
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": {
            "kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux"}}}
        with contextlib.suppress(RuntimeError):  # exists already (a second kubelet run on the same plane)
            await self._call("POST", "/api/v1/nodes", node)
        status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                             "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
                             "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}
        await self._call("PATCH", f"/api/v1/nodes/{self.node}/status", status, content_type=STRATEGIC_MERGE)

    async def _renew_lease(self) -> None:
        # Node heartbeat: the kubelet renews its Lease in kube-node-lease every 10 s (a quarter of 40 s).
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node}"
        while True:
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": self.node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now}}
            try:
                await self._call("PATCH", path, {"spec": lease["spec"]},
                                 content_type="application/merge-patch+json")
            except RuntimeError:
                with contextlib.suppress(RuntimeError):
                    await self._call("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                     lease)
            await asyncio.sleep(10)

    # ---------------------------------------------------------------- pods
    async def start_pod(self, namespace: str, name: str, processes: Mapping[str, PodProcess | None],
                        *, mcp_port: int | None = None) -> RunningPod:
        """Bind the pod (already created through the API server) to this node, run its processes and
        report its status. ``processes`` maps the application's container names to what they run (None:
        the caller runs it, e.g. an MCP server inside a test); the injected sidecar is run by the
        stand-in itself. ``mcp_port`` is the port the application really
        listens on here, when it differs from the pod spec's (pods share the host's loopback)."""
        pod = await self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        # The scheduler's part: a Binding sets spec.nodeName.
        await self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}})
        self._next_ip += 1
        # A pod IP from a pod CIDR: EndpointSlice validation refuses loopback addresses. Nothing ever
        # connects to it (the pod's processes listen on the host's loopback), it is only published.
        running = RunningPod(namespace, name, pod["metadata"]["uid"], f"10.244.0.{self._next_ip}",
                             self.folder / f"{namespace}-{name}",
                             local_ip=f"127.1.{self._next_ip // 256 % 256}.{self._next_ip % 256}")
        running.folder.mkdir(parents=True, exist_ok=True)
        self.pods[(namespace, name)] = running
        # Native sidecars (init containers with restartPolicy Always) start before the app containers.
        for container in pod["spec"].get("initContainers") or []:
            if container["name"] == SIDECAR:
                await self._start_sidecar(running, pod, container, mcp_port)
        for container in pod["spec"]["containers"]:
            if container["name"] in processes:
                spec = processes[container["name"]]
                if spec is None:
                    running.external[container["name"]] = True
                    continue
                env = {**_plain_env(container), **spec.env}
                running.processes[container["name"]] = await self._spawn(running, container["name"], spec.argv, env)
        await self.sync_status(running)
        return running

    async def _start_sidecar(self, running: RunningPod, pod: Mapping[str, Any], container: Mapping[str, Any],
                             mcp_port: int | None) -> None:
        env = _plain_env(container)
        # The downward API: status.podIP (the sidecar checks that the MCP server does not answer there, past
        # its in-line proxy), as the pod's processes reach their own IP here.
        env.update({item["name"]: running.local_ip for item in container.get("env") or []
                    if ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "status.podIP"})
        # The projected serviceAccountToken volume: the kubelet asks TokenRequest for a token bound to
        # the pod with the volume's audience and writes it into the mount. Here the mount is a file.
        token_source = _projected_token(pod, container)
        token = await asyncio.to_thread(
            self.plane.request_token, running.namespace, pod["spec"].get("serviceAccountName") or "default",
            audience=token_source["audience"], pod=(running.name, running.uid),
            seconds=int(token_source.get("expirationSeconds", 3600)))
        token_file = running.folder / "lockstep-token"
        token_file.write_text(token)
        env["LOCKSTEP_TOKEN_PATH"] = str(token_file)
        # Pods share the host's loopback here, not a network namespace each: free ports per pod.
        running.sidecar_port = free_port()
        env["LOCKSTEP_SIDECAR_PORT"] = str(running.sidecar_port)
        if mcp_port is not None:
            env["LOCKSTEP_MCP_PORT"] = str(mcp_port)
        if env.get("LOCKSTEP_PROXY_PORT"):
            # Every proxied pod's spec says the same port (8090 by default): one per pod here, on a free one.
            running.proxy_port = free_port()
            env["LOCKSTEP_PROXY_PORT"] = str(running.proxy_port)
        argv = [sys.executable, "-m", "lockstep.cli", "sidecar"]
        running.processes[SIDECAR] = await self._spawn(running, SIDECAR, argv, env)

    async def _spawn(self, running: RunningPod, container: str, argv: Sequence[str],
                     env: Mapping[str, str]) -> asyncio.subprocess.Process:
        log = (running.folder / f"{container}.log").open("ab")
        base = {key: value for key, value in os.environ.items() if not key.startswith("LOCKSTEP_")}
        try:
            return await asyncio.create_subprocess_exec(*argv, env={**base, **env}, stdout=log,
                                                        stderr=asyncio.subprocess.STDOUT,
                                                        stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()

    async def sync_status(self, running: RunningPod) -> dict[str, Any]:
        """Write the pod's status as the kubelet's status manager computes it."""
        pod = await self._call("GET", f"/api/v1/namespaces/{running.namespace}/pods/{running.name}")
        conditions = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
        statuses = []
        for container in [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]:
            alive = running.alive(container["name"])
            statuses.append({"name": container["name"], "image": container.get("image", ""), "imageID": "",
                             "ready": alive, "started": alive, "restartCount": 0,
                             "state": {"running": {"startedAt": _now()}} if alive else
                             {"waiting": {"reason": "ContainerCreating"}}})
        containers_ready = all(status["ready"] for status in statuses)
        # GeneratePodReadyCondition: Ready needs every container ready and every readiness gate True.
        gates = [gate["conditionType"] for gate in pod["spec"].get("readinessGates") or []]
        gates_true = all(conditions.get(gate, {}).get("status") == "True" for gate in gates)
        ready = containers_ready and gates_true
        reason = "" if ready else ("ContainersNotReady" if not containers_ready else "ReadinessGatesNotReady")
        wanted = {
            "PodScheduled": ("True", ""), "Initialized": ("True", ""),
            "ContainersReady": ("True" if containers_ready else "False", "" if containers_ready else "ContainersNotReady"),
            "Ready": ("True" if ready else "False", reason),
        }
        new_conditions = []
        for type_, (status, why) in wanted.items():
            old = conditions.get(type_)
            if old and old.get("status") == status:
                continue
            entry = {"type": type_, "status": status, "lastTransitionTime": _now()}
            if why:
                entry["reason"] = why
            new_conditions.append(entry)
        init_names = {c["name"] for c in pod["spec"].get("initContainers") or []}
        patch: dict[str, Any] = {"status": {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": running.ip, "podIPs": [{"ip": running.ip}],
            "startTime": (pod.get("status") or {}).get("startTime") or _now(),
            "containerStatuses": [s for s in statuses if s["name"] not in init_names],
            "initContainerStatuses": [s for s in statuses if s["name"] in init_names]}}
        if new_conditions:
            patch["status"]["conditions"] = new_conditions  # merged by type (strategic merge)
        return dict(await self._call("PATCH", f"/api/v1/namespaces/{running.namespace}/pods/{running.name}/status",
                                     patch, content_type=STRATEGIC_MERGE))

    async def _watch_pods(self) -> None:
        """The kubelet's pod watch: recompute Ready when a condition (a readiness gate) changes, and
        finish the deletion of terminating pods."""
        path = f"/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D{self.node}"
        assert self._session is not None
        while True:
            try:
                async with self._session.get(self.plane.server + path,
                                             timeout=aiohttp.ClientTimeout(total=None)) as response:
                    async for line in response.content:
                        if line.strip():
                            await self._on_pod_event(json.loads(line))
            except (TimeoutError, aiohttp.ClientError, ValueError):
                await asyncio.sleep(0.2)

    async def _on_pod_event(self, event: Mapping[str, Any]) -> None:
        pod = event.get("object") or {}
        key = ((pod.get("metadata") or {}).get("namespace"), (pod.get("metadata") or {}).get("name"))
        running = self.pods.get(key)  # type: ignore[arg-type]
        if running is None or event.get("type") == "DELETED":
            return
        if pod["metadata"].get("deletionTimestamp"):
            await self.delete(running)
            return
        conditions = {c["type"]: c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
        gates = [gate["conditionType"] for gate in pod["spec"].get("readinessGates") or []]
        gates_true = all(conditions.get(gate) == "True" for gate in gates)
        if (conditions.get("Ready") == "True") != (gates_true and conditions.get("ContainersReady") == "True"):
            with contextlib.suppress(RuntimeError):
                await self.sync_status(running)

    async def delete(self, running: RunningPod) -> None:
        """Stop the pod's processes, then the final delete with gracePeriodSeconds 0."""
        await self._kill(running)
        self.pods.pop((running.namespace, running.name), None)
        with contextlib.suppress(RuntimeError):
            await self._call("DELETE", f"/api/v1/namespaces/{running.namespace}/pods/{running.name}",
                             {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                              "preconditions": {"uid": running.uid}})

    async def stop_container(self, running: RunningPod, container: str) -> None:
        """A container that exited (for a test of what follows); its status is reported not ready."""
        process = running.processes.get(container)
        if process is not None:
            await _terminate(process)
        await self.sync_status(running)

    async def _kill(self, running: RunningPod) -> None:
        for process in running.processes.values():
            await _terminate(process)


async def _terminate(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


def _plain_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's literal variables, as the kubelet sets them: one without a value (the API server
    drops an empty one) is set to the empty string; valueFrom entries are not resolved here (the sidecar's
    ``status.podIP`` is, in ``_start_sidecar``)."""
    return {item["name"]: str(item.get("value", "")) for item in container.get("env") or [] if "valueFrom" not in item}


def _projected_token(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    mounted = {mount["name"] for mount in container.get("volumeMounts") or []}
    for volume in pod["spec"].get("volumes") or []:
        if volume["name"] not in mounted:
            continue
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token and token.get("audience"):
                return dict(token)
    raise RuntimeError(f"container {container['name']} mounts no projected token with an audience")
