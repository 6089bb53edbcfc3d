"""The main job, on one machine: Lockstep's whole loop with real parts.

    make demo                  # or: lockstep demo [--keep] [--backend auto|real|emulated]

The real operator (kopf, report endpoint, admission webhooks), the example MCP server
(examples/weather_server.py) and the real sidecar run as they do in a cluster; a pod is admitted
through the mutating webhook; the demo plays the kubelet's part only. An agent (the ``mcp`` SDK's client)
holds one session through the sidecar's in-line proxy across the rug pull, and the demo fails if it
ever receives the poisoned description. The API server is a real
control plane (kube-apiserver + etcd + kube-controller-manager) when KUBEBUILDER_ASSETS names them,
and the kmock emulation otherwise; the first line says which. It exits non-zero if any step does not
happen as narrated.

The control plane and the kubelet stand-in are part of the product (lockstep/demo/); the emulator and the
chart install are still test support (tests/lockstep_testing), so this program runs from a source checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import yaml
from lockstep.demo.control_plane import assets_folder, free_port

NAMESPACE = "agents"
GATE = "lockstep.dev/interface-verified"
#: What only the rug-pulled get_forecast carries (examples/weather_server.py, POISONED_DESCRIPTION).
POISON_MARKER = "<IMPORTANT>"
#: The agent lists tools on every tools/list_changed and at least this often (seconds).
AGENT_INTERVAL = 0.5
LOCKSTEP = [sys.executable, "-m", "lockstep.cli"]
STEP_TIMEOUT = 60.0


class DemoFailed(Exception):
    """A step did not happen as narrated."""


class Narrator:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def stamp(self) -> str:
        return f"[{time.monotonic() - self.started:6.2f}s]"

    def say(self, text: str) -> None:
        print(f"{self.stamp()} {text}", flush=True)

    def detail(self, text: str) -> None:
        for line in text.rstrip().splitlines():
            print(f"           {line}", flush=True)

    async def until(self, what: str, check: Callable[[], Any], timeout: float = STEP_TIMEOUT) -> Any:
        """Wait for ``check()`` to be truthy, with a progress dot every second; fail the demo on time-out."""
        print(f"{self.stamp()} … {what}", end="", flush=True)
        deadline, next_dot = time.monotonic() + timeout, time.monotonic() + 1
        while time.monotonic() < deadline:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                print(" ✓", flush=True)
                return value
            if time.monotonic() > next_dot:
                print(".", end="", flush=True)
                next_dot += 1
            await asyncio.sleep(0.02)
        print(" ✗", flush=True)
        raise DemoFailed(f"{what}: did not happen within {timeout:.0f}s")


async def run_cli(narrator: Narrator, *args: str, expect: int, show: int = 40) -> str:
    """Run the real CLI as its own process (the emulated API server answers on this event loop); show
    the first ``show`` lines of its output."""
    print(f"\n$ lockstep {' '.join(args)}", flush=True)
    process = await asyncio.create_subprocess_exec(*LOCKSTEP, *args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    result = subprocess.CompletedProcess(args, process.returncode or 0, stdout.decode(), stderr.decode())
    lines = (result.stdout + result.stderr).rstrip().splitlines()
    print("\n".join(lines[:show]), flush=True)
    if len(lines) > show:
        print(f"… ({len(lines) - show} more lines)", flush=True)
    print(f"(exit {result.returncode})\n", flush=True)
    if result.returncode != expect:
        raise DemoFailed(f"lockstep {args[0]} exited {result.returncode}, expected {expect}")
    return result.stdout


def weather_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "weather-0", "namespace": NAMESPACE, "labels": {"app": "weather"}},
            "spec": {"containers": [{"name": "server", "image": "example.com/weather-mcp:1.0",
                                     "ports": [{"name": "mcp", "containerPort": 8080}]}]}}


def weather_server_argv(port: int) -> list[str]:
    return [sys.executable, str(HERE / "weather_server.py"), "--port", str(port)]


# ---------------------------------------------------------------- the two backends


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
        from lockstep.demo.kubelet import Kubelet
        from lockstep_testing.lockstep_install import install_lockstep

        narrator.say("starting the control plane (etcd, kube-apiserver, kube-controller-manager)")
        assets = assets_folder()
        assert assets is not None
        self.plane = self.stack.enter_context(start_control_plane(self.folder / "control-plane", assets))
        narrator.say(f"API server ready at {self.plane.server}; installing Lockstep as the chart does "
                     "(CRD, RBAC, operator under its ServiceAccount, webhooks)")
        self.lockstep = await self.stack.enter_async_context(install_lockstep(self.plane, self.folder / "lockstep"))
        self.kubelet = await self.stack.enter_async_context(Kubelet(self.plane, self.folder / "node").running())
        from lockstep_testing.lockstep_install import apply

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
        from lockstep_testing.lockstep_install import apply

        apply(self.plane, body)

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        from lockstep_testing.lockstep_install import apply

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
        from lockstep_testing.kmock_support import Emulator
        from lockstep_testing.lockstep_cluster import lockstep_cluster

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
        gate = _condition(self.pod(name), GATE)
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


def _condition(pod: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for entry in (pod.get("status") or {}).get("conditions") or []:
        if entry["type"] == type_:
            return dict(entry)
    return None


# ---------------------------------------------------------------- the connected agent


class ConnectedAgent:
    """An agent that holds ONE MCP session (the ``mcp`` SDK's client over streamable HTTP) through the pod's
    in-line proxy (the Service's ``targetPort: lockstep-mcp``; here its port on the host's loopback) and lists
    tools at once on every ``notifications/tools/list_changed``, and every AGENT_INTERVAL seconds. A rug pull
    is aimed at exactly such agents: leaving the Service steers only new connections. Every answer is kept
    with its time, classified: ``clean``, ``POISONED`` (carries the rug pull's marker), ``refused`` (the
    proxy refused the answer), ``isolated`` (every request refused while the verdict is not True) or
    ``error``."""

    def __init__(self, url: str, narrator: Narrator) -> None:
        self.url, self.narrator = url, narrator
        self.entries: list[tuple[str, str, str]] = []  # (narrator's stamp, kind, what it received)
        self.session_id: str | None = None
        self.statuses: list[int] = []
        self._shown = 0
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def count(self, kind: str, since: int = 0) -> int:
        return sum(1 for _, entry_kind, _ in self.entries[since:] if entry_kind == kind)

    @property
    def poisoned(self) -> int:
        return self.count("POISONED")

    async def connect(self) -> None:
        self._task = asyncio.create_task(self._run(), name="demo-agent")
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait({ready, self._task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not self._ready.is_set():
            await self.disconnect()
            raise DemoFailed("the agent could not open a session through the in-line proxy: "
                             + (self.entries[-1][2] if self.entries else "no answer within 30s"))

    async def disconnect(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 15)

    def _record(self, kind: str, text: str) -> None:
        self.entries.append((self.narrator.stamp(), kind, text))

    async def _on_response(self, response: Any) -> None:
        if response.request.method == "POST":
            self.statuses.append(response.status_code)
            self.session_id = self.session_id or response.headers.get("mcp-session-id")

    async def _on_message(self, message: Any) -> None:
        import mcp.types as types

        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            self._record("list_changed", "notifications/tools/list_changed (the server announces new tools)")
            self._changed.set()

    async def _run(self) -> None:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        try:
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=300), trust_env=False,
                                          event_hooks={"response": [self._on_response]}) as http, \
                    streamable_http_client(self.url, http_client=http) as (read, write), \
                    ClientSession(read, write, message_handler=self._on_message) as session:
                await session.initialize()
                await self._list(session)
                self._ready.set()
                while not self._stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wait(), AGENT_INTERVAL)
                    if not self._stop.is_set():
                        await self._list(session)
        except Exception as error:  # noqa: BLE001 - narrated, and the demo fails if it matters
            self._record("error", f"session ended: {error!r:.200}")

    async def _wait(self) -> None:
        changed, stop = asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({changed, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            stop.cancel()
        self._changed.clear()

    async def _list(self, session: Any) -> None:
        from mcp.shared.exceptions import MCPError

        before = len(self.statuses)
        try:
            result = await asyncio.wait_for(session.list_tools(), 10)
        except MCPError as error:
            status = self.statuses[-1] if len(self.statuses) > before else None
            http = f"HTTP {status}, " if status else ""
            kind = "isolated" if "isolated by Lockstep" in error.error.message else "refused"
            self._record(kind, f"tools/list → refused ({http}{error.error.code}): "
                               f"{_short(error.error.message, 130)}")
            return
        except Exception as error:  # noqa: BLE001
            self._record("error", f"tools/list → {error!r:.200}")
            return
        tools = [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in result.tools]
        forecast = next((tool for tool in tools if tool["name"] == "get_forecast"), {})
        poisoned = POISON_MARKER in json.dumps(tools)
        described = (forecast.get("description") or "").replace("\n", " ")
        self._record("POISONED" if poisoned else "clean",
                     f"tools/list → {', '.join(tool['name'] for tool in tools)}; get_forecast: {described!r}")

    def show(self, heading: str) -> None:
        """Narrate what the agent received since the last call (if anything), runs of the same answer
        collapsed."""
        new = self.entries[self._shown:]
        self._shown = len(self.entries)
        if not new:
            return
        self.narrator.say(heading)
        index = 0
        while index < len(new):
            stamp, kind, text = new[index]
            run = index + 1
            while run < len(new) and new[run][1:] == (kind, text):
                run += 1
            repeated = f"  (×{run - index}, the last at {new[run - 1][0].strip('[] ')})" if run - index > 1 else ""
            self.narrator.detail(f"{stamp} {'!! ' if kind == 'POISONED' else ''}{text}{repeated}")
            index = run


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


# ---------------------------------------------------------------- the story


async def story(backend: RealBackend | EmulatedBackend, narrator: Narrator, folder: Path, keep: bool) -> None:
    await backend.start(narrator)
    port = free_port()
    reference = await asyncio.create_subprocess_exec(*weather_server_argv(port), stdout=asyncio.subprocess.DEVNULL,
                                                     stderr=asyncio.subprocess.DEVNULL)
    try:
        await narrator.until("the reviewed example MCP server answers", lambda: _listening(port))
        manifest_text = await run_cli(narrator, "snapshot", f"http://127.0.0.1:{port}/mcp", "--name", "weather",
                                "-n", NAMESPACE, expect=0, show=12)
    finally:
        reference.terminate()
        await reference.wait()
    manifest = yaml.safe_load(manifest_text)
    (folder / "weather.yaml").write_text(manifest_text)
    await backend.apply(manifest)
    narrator.say(f"pinned: MCPServerInterface {NAMESPACE}/weather approves revision "
                 f"{manifest['spec']['approved'][0]['digest'][:19]}… (written to {folder / 'weather.yaml'})")

    admitted = await backend.create_pod(weather_pod())
    sidecars = [c["name"] for c in admitted["spec"].get("initContainers") or []]
    if "lockstep-sidecar" not in sidecars:
        raise DemoFailed("the mutating webhook did not inject the sidecar")
    narrator.say("pod agents/weather-0 admitted: the webhook injected lockstep-sidecar, the readiness gate "
                 "and a projected token (audience lockstep.dev)")
    rug_pull = await backend.run_pod("weather-0", port)
    narrator.say("kubelet's part: the MCP server and the sidecar run as processes")
    await narrator.until("the sidecar reports and the operator verifies the pod",
                         lambda: (_condition(backend.pod("weather-0"), GATE) or {}).get("status") == "True")
    narrator.say(f"the server listens on 127.0.0.1 only: the sidecar's check found nothing answering on the "
                 f"pod's IP ({backend.local_ip} here) past the in-line proxy (else: False, ServerExposed)")
    await narrator.until(f"the pod is in Service agents/weather ({backend.service_note()})",
                         lambda: backend.in_service("weather-0") is True)
    if backend.proxy_port is None:
        raise DemoFailed("the webhook did not run the sidecar's in-line proxy (enforcement Isolate)")
    agent = ConnectedAgent(f"http://127.0.0.1:{backend.proxy_port}/mcp", narrator)
    await agent.connect()
    try:
        caught_ms = await rug_pull_story(backend, narrator, agent, rug_pull)
    finally:
        await agent.disconnect()
    agent.show("the connected agent, until it hangs up before the review:")
    if agent.poisoned:
        raise DemoFailed(f"the connected agent received the poisoned description {agent.poisoned} time(s)")
    answers = [kind for _, kind, _ in agent.entries if kind not in ("list_changed",)]
    narrator.say(f"connected agent: {len(answers)} answers on one session, {agent.count('clean')} clean before "
                 f"the pull, {agent.count('refused')} refused and {agent.count('isolated')} isolated after it, "
                 f"0 poisoned ✓")

    kube = ["--kubeconfig", str(backend.kubeconfig)]
    await run_cli(narrator, "diff", "weather", "-n", NAMESPACE, *kube, expect=1)
    await run_cli(narrator, "approve", "weather", "-n", NAMESPACE, "--apply", *kube, expect=0)
    await narrator.until("the operator re-judges the pod's last report against the new revision",
                         lambda: (_condition(backend.pod("weather-0"), GATE) or {}).get("status") == "True")
    await narrator.until("the pod is back in Service agents/weather", lambda: backend.in_service("weather-0") is True)
    print(f"""
Done: pinned → verified and in the Service → rug pull caught in {caught_ms:.0f} ms, pod out of the Service,
the agent connected through the in-line proxy refused, never poisoned → reviewed with lockstep diff →
approved with lockstep approve → back in the Service.

Where to go next:
  • put it on a cluster:       helm install lockstep charts/lockstep (docs/helm.md)
  • approve by pull request:   docs/gitops.md (Argo CD, Flux)
  • watch drift in Grafana:    docs/dashboard.md, alerts in docs/alerts.md
  • gate CI on the pin:        lockstep verify URL --against weather.yaml""", flush=True)
    if keep:
        print(f"\nStill running (--keep): metrics at {backend.metrics_url}, kubeconfig {backend.kubeconfig}. "
              "Ctrl-C stops.", flush=True)
        await asyncio.Event().wait()


async def rug_pull_story(backend: RealBackend | EmulatedBackend, narrator: Narrator, agent: ConnectedAgent,
                         rug_pull: Callable[[], None]) -> float:
    """The rug pull, with an agent connected: returns the milliseconds from the pull to the verdict."""
    agent.show(f"an agent connects through the pod's in-line proxy (what Service targetPort lockstep-mcp reaches; "
               f"here {agent.url}) and holds ONE session (Mcp-Session-Id {(agent.session_id or '?')[:12]}…), "
               f"listing tools on every list_changed and every {AGENT_INTERVAL:g} s:")
    if agent.count("clean") < 1:
        raise DemoFailed("the connected agent got no clean list before the rug pull")

    narrator.say("RUG PULL: get_forecast's description gains hidden <IMPORTANT> instructions and the tool "
                 "quietly becomes destructive (readOnlyHint true → false, destructiveHint true)")
    pulled, pulled_at = time.monotonic(), len(agent.entries)
    rug_pull()
    await narrator.until("the drift is caught",
                         lambda: (_condition(backend.pod("weather-0"), GATE) or {}).get("status") == "False")
    caught_ms = (time.monotonic() - pulled) * 1000
    verdict = _condition(backend.pod("weather-0"), GATE) or {}
    narrator.say(f"drift caught in {caught_ms:.0f} ms (list_changed → sidecar → operator): condition {GATE}="
                 f"False, reason {verdict.get('reason')}")
    await narrator.until("the pod leaves Service agents/weather", lambda: backend.in_service("weather-0") is False)
    drift_events = await narrator.until("a Warning Event about the pod", lambda: [
        e for e in backend.events("weather-0") if e.get("type") == "Warning"], timeout=15)
    narrator.say(f"Event: {drift_events[-1]['type']} {drift_events[-1]['reason']} pod/weather-0: "
                 f"{drift_events[-1]['message'][:110]}")
    metric = await narrator.until("the drifted pod in the operator's metrics",
                                  lambda: _metric_line(backend.metrics_url, 'lockstep_pods{', 'state="drifted"'),
                                  timeout=15)
    narrator.say(f"metric: {metric}")

    # The agent's session is still open: kube-proxy keeps established flows to a pod that left its Service,
    # so only the proxy on the path stands between it and the poisoned list.
    await narrator.until("the connected agent's session is isolated by the proxy (every request refused)",
                         lambda: agent.count("isolated", since=pulled_at) >= 2 or agent.poisoned, timeout=15)
    agent.show("the connected agent, same session, since the rug pull:")
    if agent.poisoned:
        raise DemoFailed(f"the connected agent received the poisoned description {agent.poisoned} time(s)")
    return caught_ms


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def _metric_line(url: str, prefix: str, needle: str) -> str | None:
    """The first non-zero sample of the metric whose labels contain ``needle``."""
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(prefix) and needle in line and not line.endswith(" 0.0"):
            return line
    return None


async def main_async(args: argparse.Namespace) -> int:
    real = args.backend == "real" or (args.backend == "auto" and assets_folder() is not None)
    if args.backend == "real" and assets_folder() is None:
        print("lockstep demo: --backend real needs KUBEBUILDER_ASSETS (a folder with etcd, kube-apiserver "
              "and kube-controller-manager)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="lockstep-demo-") as tmp:
        folder = Path(tmp)
        backend: RealBackend | EmulatedBackend = RealBackend(folder) if real else EmulatedBackend(folder)
        narrator = Narrator()
        print(f"Lockstep demo on {backend.describe()}\n", flush=True)
        try:
            await story(backend, narrator, folder, args.keep)
        except DemoFailed as failure:
            print(f"\ndemo failed: {failure}", file=sys.stderr, flush=True)
            return 1
        finally:
            await backend.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Lockstep's whole loop on one machine.")
    parser.add_argument("--keep", action="store_true", help="leave everything running and print the metrics URL")
    parser.add_argument("--backend", choices=["auto", "real", "emulated"], default="auto",
                        help="real control plane (needs KUBEBUILDER_ASSETS), kmock emulation, or auto")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    import logging

    logging.basicConfig(level=logging.CRITICAL)  # the operator's own logs would drown the story
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
