"""Faults injected into a running Lockstep, on a real control plane, each with a rug pull at an awkward
moment. For every fault: no verdict is lost (the drifted pod is cut within 30 s of the fault's end), the
pod whose server never changed never leaves True (no flap: every condition write is seen through a
watch, so even a flip of 60 ms is caught), and the time to converge is recorded (printed at the end).

One rig serves the module (the faults run in order, on one control plane of their own): the operator as
a ``lockstep operator`` process behind a relay that stands in for its Service, two pods run by the
kubelet stand-in with real sidecars: ``steady`` (its server never changes) and ``drifter`` (rug-pulled
during each fault, then put back, which verifies it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lockstep_testing.cluster_objects import GATE, POISON, TOOLS, pin, weather_pod
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError, assets_folder, start_control_plane
from lockstep.demo.kubelet import Kubelet
from lockstep_testing.lockstep_install import RELEASE, api_path, apply
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.mcp_servers import MutableServer
from lockstep_testing.operator_process import (
    FIGURES,
    OperatorProcess,
    ProcessInstallation,
    ReportRelay,
    install_lockstep_processes,
)

from lockstep_testing.polling import eventually, eventually_sync
from lockstep_testing.timings import FAST_TIMINGS

from lockstep.operator.replicas.membership import owner

pytestmark = pytest.mark.asyncio(loop_scope="module")

STALE_AFTER = 20  # seconds; the sidecars report every 2 s (a lost request costs its 10 s timeout)
REPORT_INTERVAL = 2.0
CUT_WITHIN = 30.0  # a drifted pod is cut within this long after the fault ends
PEERING_LIFETIME = FAST_TIMINGS["peering_lifetime"]  # a killed replica's entry in the peering object expires after this long
#: The operator processes retry the API after these waits, then every API_BACKOFF_THEN seconds for ever.
API_BACKOFFS, API_BACKOFF_THEN = FAST_TIMINGS["api_backoffs"], FAST_TIMINGS["api_backoff_then"]
#: Over ten times as long as a retry schedule that ran out after API_BACKOFFS would last (kopf's own
#: default, 1..21 s, runs out after about 90 s: the 3-minute outage this test had before the operator's
#: schedule became configurable).
OUTAGE = 10.0
ORIGINAL = TOOLS[0]["description"]


# ---------------------------------------------------------------- the pods' conditions, every write of them


class ConditionLog:
    """Every value the gate condition of the namespace's pods took, from a watch (resumed from its last
    resourceVersion across API outages, so that nothing written in between is missed)."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace
        self.seen: dict[str, list[tuple[float, str, str]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="condition-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _note(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        for entry in (pod.get("status") or {}).get("conditions") or []:
            if entry["type"] == GATE:
                value = (str(entry["status"]), str(entry.get("reason")))
                history = self.seen.setdefault(name, [])
                if not history or history[-1][1:] != value:
                    history.append((time.monotonic(), *value))

    def _run(self) -> None:
        version = ""
        context = self.plane.ssl_context()
        base = f"{self.plane.server}/api/v1/namespaces/{self.namespace}/pods"
        while not self._stop.is_set():
            try:
                if not version:
                    with urllib.request.urlopen(base, context=context, timeout=5) as answer:
                        listing = json.loads(answer.read())
                    for pod in listing["items"]:
                        self._note(pod)
                    version = listing["metadata"]["resourceVersion"]
                url = f"{base}?watch=1&allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds=30"
                with urllib.request.urlopen(url, context=context, timeout=5) as stream:
                    for line in stream:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            version = ""  # 410 Gone: list again
                            break
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._note(event["object"])
                        if self._stop.is_set():
                            return
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)

    def now(self, pod: str) -> tuple[str, str] | None:
        history = self.seen.get(pod) or []
        return history[-1][1:] if history else None

    def since(self, pod: str, moment: float) -> list[tuple[float, str, str]]:
        return [entry for entry in self.seen.get(pod) or [] if entry[0] >= moment]

    async def first(self, pod: str, status: str, after: float, timeout: float) -> float:
        """When the pod's condition first took ``status`` after ``after``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for moment, value, _ in self.since(pod, after):
                if value == status:
                    return moment
            await asyncio.sleep(0.05)
        raise AssertionError(f"{pod} did not become {status} within {timeout:.0f}s: {self.seen.get(pod)}")


# ---------------------------------------------------------------- the rig


@dataclass
class Rig:
    plane: ControlPlane
    install: ProcessInstallation
    relay: ReportRelay
    namespace: str
    steady: McpServerHandle
    drifter: McpServerHandle
    log: ConditionLog
    folder: Path
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def operator(self) -> Any:
        return self.install.processes[-1]

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        return await asyncio.to_thread(self.plane.call, method, path, body)

    async def merge_patch(self, path: str, body: Any) -> Any:
        """A change of some fields, as `kubectl patch --type merge` makes it (no resourceVersion to race the
        operator's status writes with)."""
        return await asyncio.to_thread(self.plane.call, "PATCH", path, body, content_type="application/merge-patch+json")

    def rug_pull(self) -> None:
        self.drifter.server.update_tool("get_forecast", description=POISON)

    async def put_back(self) -> None:
        self.drifter.server.update_tool("get_forecast", description=ORIGINAL)
        await self.log.first("drifter", "True", time.monotonic() - 0.1, 60)


@pytest.fixture(scope="module")
def fault_plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A control plane of this tier's own: its processes are killed and frozen here."""
    assets = assets_folder()
    assert assets is not None
    with start_control_plane(tmp_path_factory.mktemp("fault-plane"), assets) as plane:
        yield plane


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(fault_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    plane, folder = fault_plane, tmp_path_factory.mktemp("faults")
    async with ReportRelay() as relay, \
            install_lockstep_processes(plane, folder / "lockstep", relay.port) as install:
        relay.backends[:] = install.processes
        namespace = "f-" + secrets.token_hex(4)
        apply(plane, {"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": namespace, "labels": {"lockstep.dev/inject": "enabled"}}})
        for _ in range(150):
            with contextlib.suppress(ControlPlaneError):
                plane.call("GET", api_path("ServiceAccount", namespace, "default"))
                break
            await asyncio.sleep(0.1)
        steady = McpServerHandle(MutableServer(tools=copy.deepcopy(TOOLS), kinds=("tools",)))
        drifter = McpServerHandle(MutableServer(tools=copy.deepcopy(TOOLS), kinds=("tools",)))
        async with steady.serving(), drifter.serving(), Kubelet(plane, folder / "node").running() as kubelet:
            await pin(plane, namespace, steady,
                      probe={"interval": f"{REPORT_INTERVAL:.0f}s", "timeout": "2s", "staleAfter": f"{STALE_AFTER}s"})
            log = ConditionLog(plane, namespace)
            log.start()
            for name, server in (("steady", steady), ("drifter", drifter)):
                apply(plane, weather_pod(namespace, name))
                await kubelet.start_pod(namespace, name, {"server": None}, mcp_port=server.port)
            rig = Rig(plane, install, relay, namespace, steady, drifter, log, folder)
            for name in ("steady", "drifter"):
                await log.first(name, "True", 0, 60)
            try:
                yield rig
            finally:
                log.stop()


async def run_fault(rig: Rig, fault: str, traffic: str, start: Callable[[], Awaitable[None]],
                    end: Callable[[], Awaitable[None]], *, hold: float, pull_at: float = 1.0,
                    within: float = CUT_WITHIN) -> float:
    """Start the fault, rug-pull the drifter ``pull_at`` seconds in, end the fault after ``hold`` seconds;
    then the drifter must be cut within CUT_WITHIN of the end, and steady must not have moved."""
    assert rig.log.now("steady") == ("True", "Verified") and rig.log.now("drifter") == ("True", "Verified")
    began = time.monotonic()
    await start()
    await asyncio.sleep(pull_at)
    rig.rug_pull()
    await asyncio.sleep(max(0.0, hold - pull_at))
    await end()
    ended = time.monotonic()
    cut = await rig.log.first("drifter", "False", began, hold + within + 30)
    converge = max(0.0, cut - ended)
    flaps = [entry for entry in rig.log.since("steady", began) if entry[1] != "True"]
    FIGURES.append({"fault": fault, "traffic": traffic, "lost": 0 if converge <= within else 1,
                    "flaps": len(flaps), "converge": converge})
    assert flaps == [], f"steady flapped: {flaps}"
    assert rig.log.since("drifter", began)[-1][2] == "InterfaceChanged"
    assert converge <= within, f"the drifted pod was cut {converge:.1f}s after the fault ended"
    await rig.put_back()
    return converge


def _later(*calls: Callable[[], Any]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        for call in calls:
            await asyncio.to_thread(call)
    return run


# ---------------------------------------------------------------- the faults, in order


async def test_the_operator_frozen_longer_than_stale_after_blames_no_pod(rig: Rig) -> None:
    """SIGSTOP for longer than staleAfter, then SIGCONT: the reports that waited are the operator's
    delay, not the pods' silence. (Before the fix: steady went False/ReportStale on resume.)"""
    operator = rig.operator
    await run_fault(rig, "operator frozen (SIGSTOP) 24 s > staleAfter 20 s",
                    "unchanged; no verdict changes while frozen",
                    _later(operator.freeze), _later(operator.thaw), hold=STALE_AFTER + 4)
    assert "stood still for" in operator.text()


async def test_kube_apiserver_killed_and_restarted(rig: Rig) -> None:
    text_before = len(rig.operator.text())
    await run_fault(rig, "kube-apiserver killed 12 s, restarted", "unchanged; drifted pod serves until the API is back",
                    _later(lambda: rig.plane.kill("kube-apiserver")),
                    _later(lambda: rig.plane.restart("kube-apiserver")), hold=12)
    log = rig.operator.text()[text_before:]
    assert "Traceback" not in log and "Error handling request" not in log
    # Logged once per outage, not per failed request; a restarting kube-apiserver may answer the operator's
    # probe (every 0.2 s here) and then refuse a write once more before it is ready: at most two outages.
    outages = log.count("Kubernetes API unreachable since")
    assert 1 <= outages <= 2 and log.count("Kubernetes API back after") == outages, log[-3000:]


async def test_etcd_killed(rig: Rig) -> None:
    await run_fault(rig, "etcd killed 11 s, restarted", "unchanged; drifted pod serves until etcd is back",
                    _later(lambda: rig.plane.kill("etcd")), _later(lambda: rig.plane.restart("etcd")), hold=11)


async def test_kube_apiserver_frozen(rig: Rig) -> None:
    await run_fault(rig, "kube-apiserver frozen (SIGSTOP) 14 s", "unchanged; drifted pod serves until it thaws",
                    _later(lambda: rig.plane.freeze("kube-apiserver")),
                    _later(lambda: rig.plane.thaw("kube-apiserver")), hold=14)


async def test_a_second_writer_on_the_same_pods_status(rig: Rig) -> None:
    """Another controller patches both pods' status ~30 times a second: the operator's resourceVersion-
    guarded writes meet 409s and must still land, and never drop the other writer's condition."""
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        flip = 0
        while not stop.is_set():
            for pod in ("steady", "drifter"):
                flip += 1
                patch = {"status": {"conditions": [{"type": "example.com/other", "status": str(flip % 2 == 0),
                                                    "lastTransitionTime": None}]}}
                with contextlib.suppress(ControlPlaneError, OSError):
                    rig.plane.call("PATCH", api_path("Pod", rig.namespace, pod) + "/status", patch,
                                   content_type="application/strategic-merge-patch+json")
                    writes[0] += 1
            time.sleep(0.03)

    thread = threading.Thread(target=writer, daemon=True)

    async def start() -> None:
        thread.start()

    async def end() -> None:  # after the hold, and after 100 writes (fewer fit in it on a loaded machine)
        await asyncio.to_thread(eventually_sync, lambda: writes[0] > 100, 120, "100 writes of the other writer")
        stop.set()
        await asyncio.to_thread(thread.join, 10)

    await run_fault(rig, "second writer on pods/status (~30/s)", "unchanged", start, end, hold=10, pull_at=2)
    assert writes[0] > 100
    pod = await rig.call("GET", api_path("Pod", rig.namespace, "drifter"))
    assert "example.com/other" in {c["type"] for c in pod["status"]["conditions"]}


async def test_a_partition_between_sidecars_and_operator(rig: Rig) -> None:
    """Every byte between sidecars and the report port dropped for 5 s (shorter than staleAfter: the
    pods are not silent long enough to be judged stale), the rug pull inside it."""
    await run_fault(rig, "partition sidecars / operator report port 5 s", "unchanged",
                    _later(rig.relay.partition), _later(rig.relay.heal), hold=5)


async def test_an_api_outage_longer_than_the_retry_schedule(rig: Rig) -> None:
    """Longer than a finite retry schedule would last (kopf's default ends after about 90 s, and a watch
    whose retries ended stays dead; here the operator's schedule is API_BACKOFFS, then API_BACKOFF_THEN
    for ever): the operator keeps watching, so a spec change made after the outage is seen (a watch
    event), and the operator never exited."""
    assert OUTAGE > 10 * sum(API_BACKOFFS)  # a schedule that ended after API_BACKOFFS would be long over
    operator = rig.operator
    await run_fault(rig, f"kube-apiserver away {OUTAGE:.0f} s (> 10x the finite retries)",
                    "unchanged; drifted pod serves until the API is back",
                    _later(lambda: rig.plane.kill("kube-apiserver")),
                    _later(lambda: rig.plane.restart("kube-apiserver")), hold=OUTAGE, pull_at=OUTAGE / 3)
    assert operator.popen.poll() is None
    assert operator.healthz() == 200
    # The watches live: a spec change after the outage reaches the operator (a watch event, no report).
    changed = time.monotonic()
    await rig.merge_patch(api_path("MCPServerInterface", rig.namespace, "weather"), {"spec": {"enforcement": "Audit"}})
    rig.rug_pull()
    await rig.log.first("drifter", "True", changed, 30)  # Audit: True, "audit only, would be ..."
    assert rig.log.now("drifter") == ("True", "Audit")
    await rig.merge_patch(api_path("MCPServerInterface", rig.namespace, "weather"), {"spec": {"enforcement": "Isolate"}})
    await rig.put_back()


async def _two_replicas(rig: Rig) -> tuple[OperatorProcess, OperatorProcess]:
    """Two replicas behind the Service stand-in, both serving: (the owner of the rig's resource, the
    other one, which relays its reports to the owner)."""
    for old in rig.install.processes:
        await asyncio.to_thread(old.stop)
    rig.install.processes.clear()
    rig.install.peering = True
    first = rig.install.start_replica(webhooks=True)
    second = rig.install.start_replica()
    rig.relay.backends[:] = [first, second]

    def members() -> dict[int, int]:
        """Report port -> priority of the live entries in the peering object."""
        body = rig.plane.call("GET", f"/apis/kopf.dev/v1/clusterkopfpeerings/{RELEASE}")
        return {int(str(entry["endpoint"]).rpartition(":")[2]): int(entry["priority"])
                for entry in (body.get("status") or {}).values() if isinstance(entry, dict) and entry.get("endpoint")}

    await asyncio.to_thread(eventually_sync, lambda: {first.report_port, second.report_port} <= set(members()), 60,
                            "both replicas in the peering object", interval=0.2)
    await asyncio.to_thread(eventually_sync, lambda: first.ready() and second.ready(), 30, "both replicas serving",
                            interval=0.2)
    by_port = members()
    both = ", ".join(str(priority) for priority in sorted(by_port[process.report_port] for process in (first, second)))
    await eventually(lambda: all(f"Replicas now: {both} " in process.text() for process in (first, second)),
                     what="each replica has seen the other", timeout=60)
    await asyncio.sleep(2 * REPORT_INTERVAL)  # the sidecars' next reports reach both (setup, not a check)
    chosen = owner(f"{rig.namespace}/weather", [by_port[first.report_port], by_port[second.report_port]])
    return (first, second) if chosen == by_port[first.report_port] else (second, first)


async def test_the_replica_that_does_not_own_the_resource_killed_during_a_rug_pull(rig: Rig) -> None:
    """Reports reach both replicas through the Service; the one that does not own the resource relays
    them to the owner, whose answers name its address, and the sidecars report there from then on
    (reportTo). SIGKILLed, the other replica leaves the Service's endpoints: nothing flaps, the drifted
    pod is cut."""
    _, other = await _two_replicas(rig)
    await run_fault(rig, "replica that does not own the resource SIGKILLed, rug pull 1 s later",
                    "unchanged; the sidecars report to the owner's address", _later(other.kill), _later(lambda: None),
                    hold=1)


async def test_the_owner_replica_killed_during_a_rug_pull(rig: Rig) -> None:
    """The owner is SIGKILLed (no goodbye in the peering object) one second before the rug pull: the other
    replica relays to nobody until the owner's entry expires, then takes the resource over and cuts the pod."""
    owner_process, _ = await _two_replicas(rig)
    await run_fault(rig, "owner replica SIGKILLed, rug pull 1 s later", "unchanged; reports 503 until the entry expires",
                    _later(owner_process.kill), _later(lambda: None), hold=1, within=PEERING_LIFETIME + 15)
