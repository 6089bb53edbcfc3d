"""What happens around the main loop, on a real control plane: Events a user can find with kubectl,
webhook reinvocation by the admission chain, stale reports, an operator restart, two replicas with
peering, forged reports (real TokenReview), and refusals by the validating webhook."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from lockstep_testing.cluster_objects import (
    GATE,
    POISON,
    condition,
    endpoint_ready,
    pin,
    pod_of,
    weather_pod,
    weather_service,
)
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep_testing.kmock_support import Sidecar, TlsFiles, operator_rounds
from lockstep.demo.kubelet import Kubelet
from lockstep_testing.lockstep_install import Installation, api_path, apply
from lockstep_testing.loopback import McpServerHandle, make_certificates
from lockstep_testing.mcp_servers import MutableServer
from lockstep_testing.polling import eventually

TOOLS = [{"name": "get_forecast", "description": "Forecast for a city.", "inputSchema": {"type": "object"}}]


@pytest.fixture
async def mcp() -> AsyncIterator[McpServerHandle]:
    handle = McpServerHandle(MutableServer(tools=copy.deepcopy(TOOLS), kinds=("tools",)))
    async with handle.serving():
        yield handle


def events_about(plane: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items = plane.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [event for event in items if event["involvedObject"].get("name") == name]


def sidecar_client(lockstep: Installation, folder: Path, token: str) -> Sidecar:
    ca = folder / "operator-ca.crt"
    ca.write_text(lockstep.ca_pem)
    return Sidecar(f"https://127.0.0.1:{lockstep.operator.report_port}", token, TlsFiles(ca, ca))


async def test_an_event_about_a_bare_pod_that_no_interface_selects_carries_its_uid(
        control_plane: ControlPlane, lockstep: Installation, namespace: str) -> None:
    created = apply(control_plane, weather_pod(namespace, "lonely"))
    assert {"conditionType": GATE} in created["spec"]["readinessGates"]  # fail closed: gated all the same
    found = await eventually(lambda: [e for e in events_about(control_plane, namespace, "lonely")
                                      if e["reason"] == "InterfaceNotFound"], 20, "InterfaceNotFound")
    assert found[0]["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert found[0]["involvedObject"]["kind"] == "Pod" and found[0]["type"] == "Warning"


@pytest.fixture
async def labelling_webhook(tmp_path: Path) -> AsyncIterator[tuple[int, str, list[int]]]:
    """A second mutating webhook, after Lockstep's, that adds a label: the API server then calls
    Lockstep's webhook again (reinvocationPolicy: IfNeeded)."""
    calls: list[int] = []

    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        calls.append(1)
        labels = review["request"]["object"]["metadata"].get("labels") or {}
        ops = [] if "stamped" in labels else [{"op": "add", "path": "/metadata/labels/stamped", "value": "yes"}]
        response = {"uid": review["request"]["uid"], "allowed": True}
        if ops:
            response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(ops).encode()).decode())
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": response})

    certificates = make_certificates(tmp_path / "stamp")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certificates.cert_file), str(certificates.key_file))
    app = web.Application()
    app.router.add_post("/stamp", mutate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield port, certificates.ca_pem, calls
    finally:
        await runner.cleanup()


async def test_reinvocation_by_a_later_webhook_leaves_one_sidecar(
        control_plane: ControlPlane, lockstep: Installation, namespace: str,
        labelling_webhook: tuple[int, str, list[int]]) -> None:
    port, ca_pem, calls = labelling_webhook
    apply(control_plane, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                          "metadata": {"name": "zz-stamp"}, "webhooks": [{
                              "name": "stamp.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                              "clientConfig": {"url": f"https://127.0.0.1:{port}/stamp",
                                               "caBundle": base64.b64encode(ca_pem.encode()).decode()},
                              "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                         "resources": ["pods"]}],
                              "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                              "reinvocationPolicy": "IfNeeded"}]})
    try:
        metrics_before = await _webhook_count(lockstep, "unchanged")
        # In a thread: the stamping webhook serves on this event loop.
        created = await asyncio.to_thread(apply, control_plane, weather_pod(namespace, "stamped"))
        assert created["metadata"]["labels"]["stamped"] == "yes" and calls
        spec = created["spec"]
        assert [c["name"] for c in spec["initContainers"]].count("lockstep-sidecar") == 1
        assert [g["conditionType"] for g in spec["readinessGates"]].count(GATE) == 1
        assert [v["name"] for v in spec["volumes"]].count("lockstep-token") == 1
        # Lockstep's webhook was really called a second time, and planned nothing.
        assert await _webhook_count(lockstep, "unchanged") > metrics_before
    finally:
        control_plane.call("DELETE", api_path("MutatingWebhookConfiguration", name="zz-stamp"))


async def _webhook_count(lockstep: Installation, outcome: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{lockstep.operator.metrics_port}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("lockstep_webhook_requests_total{") and f'outcome="{outcome}"' in line \
                and 'webhook="mutate"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_silent_sidecar_goes_stale_and_the_pod_leaves_its_service(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle) -> None:
    plane = control_plane
    await pin(plane, namespace, mcp, probe={"interval": "1s", "timeout": "1s", "staleAfter": "3s"})
    apply(plane, weather_service(namespace))
    apply(plane, weather_pod(namespace, "weather-0"))
    pod = await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=mcp.port)
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is True, 30, "in the Service")
    await kubelet.stop_container(pod, "lockstep-sidecar")
    await eventually(lambda: _reason(plane, namespace, "weather-0") == "ReportStale", 30, "ReportStale")
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is False, 30, "out of the Service")


def _reason(plane: ControlPlane, namespace: str, name: str) -> str | None:
    for entry in (pod_of(plane, namespace, name).get("status") or {}).get("conditions") or []:
        if entry["type"] == GATE:
            return str(entry.get("reason"))
    return None


async def test_an_operator_restart_keeps_verdicts_without_flapping(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle) -> None:
    plane = control_plane
    await pin(plane, namespace, mcp)
    apply(plane, weather_pod(namespace, "weather-0"))
    await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=mcp.port)
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified")
    before = _gate(plane, namespace, "weather-0")

    first = lockstep.operators.pop()
    first.stop.set()
    await asyncio.to_thread(first.thread.join, 20)
    async with lockstep.run_replica() as second:
        assert second.operator.reconciler is not None
        await eventually(lambda: second.operator.reconciler.synced.is_set(), 20, "resynced")  # type: ignore[union-attr]
        await operator_rounds(second)  # stale timer rounds and status flushes, which would flip a lost verdict
        assert _gate(plane, namespace, "weather-0") == before  # same status, same lastTransitionTime
        warnings = [e for e in events_about(plane, namespace, "weather-0") if e["type"] == "Warning"]
        assert warnings == []


def _gate(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    [gate] = [c for c in pod_of(plane, namespace, name)["status"]["conditions"] if c["type"] == GATE]
    return dict(gate)


async def test_forged_reports_are_refused_by_a_real_token_review(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle, tmp_path: Path) -> None:
    plane = control_plane
    await pin(plane, namespace, mcp)
    victim = apply(plane, weather_pod(namespace, "victim"))
    attacker = apply(plane, weather_pod(namespace, "attacker"))
    await kubelet.start_pod(namespace, "victim", {"server": None}, mcp_port=mcp.port)
    await eventually(lambda: condition(pod_of(plane, namespace, "victim"), GATE) == "True", 30, "victim verified")

    mcp.server.update_tool("get_forecast", description=POISON)
    poisoned = (await sidecar_client(lockstep, tmp_path, "x").observe(mcp.url)).to_dict()

    def token(audience: str, pod: dict[str, Any]) -> str:
        return plane.request_token(namespace, "default", audience=audience,
                                   pod=(pod["metadata"]["name"], pod["metadata"]["uid"]))

    # Another audience (e.g. the pod's API token): not a Lockstep credential.
    status, _ = await sidecar_client(lockstep, tmp_path, token("https://kubernetes.default.svc", victim)).post(poisoned)
    assert status == 401
    # The attacker's own token: the report is about the attacker's pod, never the victim's.
    status, answer = await sidecar_client(lockstep, tmp_path, token("lockstep.dev", attacker)).post(poisoned)
    assert status == 202 and answer["verdict"]["status"] == "False"
    assert condition(pod_of(plane, namespace, "victim"), GATE) == "True"
    # A token of a deleted pod no longer authenticates (the API server checks the bound object).
    gone = token("lockstep.dev", attacker)
    plane.call("DELETE", api_path("Pod", namespace, "attacker") + "?gracePeriodSeconds=0")
    await eventually(lambda: _missing(plane, namespace, "attacker"), 20, "attacker deleted")
    client = sidecar_client(lockstep, tmp_path, gone)
    lockstep.operator.operator.report_server.reviewer._cache.clear()  # type: ignore[union-attr]
    status, _ = await client.post(poisoned)
    assert status in (401, 404)
    assert condition(pod_of(plane, namespace, "victim"), GATE) == "True"


def _missing(plane: ControlPlane, namespace: str, name: str) -> bool:
    try:
        plane.call("GET", api_path("Pod", namespace, name))
    except ControlPlaneError as error:
        return "HTTP 404" in str(error)
    return False


async def test_two_replicas_both_serve_and_one_takes_over_from_the_other(
        control_plane: ControlPlane, tmp_path: Path, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle) -> None:
    """With the chart's RBAC on a real API server: both replicas renew their entries in the peering
    object and serve reports; the resource's owner judges, the other relays to it; when the owner
    stops, the other takes the resource over from the cluster, and the pod's condition never flips."""
    from lockstep_testing.lockstep_install import install_lockstep

    plane = control_plane
    async with install_lockstep(plane, tmp_path / "peered", peering=True) as lockstep:
        first = lockstep.operator
        async with lockstep.run_replica(peering_priority=1) as second:
            replicas = [first, second]
            for replica in replicas:
                await eventually(lambda: len(replica.operator.membership.members) == 2, 30,  # type: ignore[union-attr]  # noqa: B023
                                 "both replicas in the peering object")
            await pin(plane, namespace, mcp)
            pod = apply(plane, weather_pod(namespace, "weather-0"))
            key = (namespace, "weather")
            await eventually(lambda: all(replica.operator.reconciler.cache.resource(*key)  # type: ignore[union-attr]
                                         for replica in replicas), 20, "both replicas see the resource")
            [owner] = [r for r in replicas if r.operator.reconciler.ownership.owns_resource(key)]  # type: ignore[union-attr]
            [other] = [r for r in replicas if r is not owner]
            token = plane.request_token(namespace, "default", audience="lockstep.dev",
                                        pod=(pod["metadata"]["name"], pod["metadata"]["uid"]))
            tls = sidecar_client(lockstep, tmp_path, token).tls
            report = (await sidecar_client(lockstep, tmp_path, token).observe(mcp.url)).to_dict()
            to_other = Sidecar(f"https://127.0.0.1:{other.report_port}", token, tls)
            status, answer = await to_other.post(report)
            assert (status, answer["verdict"]["reason"]) == (202, "Verified")  # relayed to the owner
            await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 20,
                             "judged by the owner")
            assert key in owner.operator.reconciler.state.owned  # type: ignore[union-attr]
            version = pod_of(plane, namespace, "weather-0")["metadata"]["resourceVersion"]

            owner.stop.set()
            await asyncio.to_thread(owner.thread.join, 20)
            if owner in lockstep.operators:
                lockstep.operators.remove(owner)
            await eventually(lambda: other.operator.reconciler.ownership.owns_resource(key), 30,  # type: ignore[union-attr]
                             "the other replica owns the resource")
            status, answer = await to_other.post(report)
            assert (status, answer["verdict"]["reason"]) == (202, "Verified")
            assert pod_of(plane, namespace, "weather-0")["metadata"]["resourceVersion"] == version  # no flap


VALIDATION_REFUSED = [
    ("digest that does not match its components",
     lambda m: m["spec"]["approved"][0].update(digest="sha256:" + "0" * 64), "digest"),
    ("selector that selects nothing",
     lambda m: m["spec"].update(selector={"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}),
     "selects no pod"),
]


@pytest.mark.parametrize(("change", "expected"), [case[1:] for case in VALIDATION_REFUSED],
                         ids=[case[0] for case in VALIDATION_REFUSED])
async def test_the_validating_webhook_refuses_through_the_api_server(
        control_plane: ControlPlane, lockstep: Installation, namespace: str, mcp: McpServerHandle,
        change: Any, expected: str) -> None:
    from lockstep.core.manifest import build_manifest
    from lockstep.core.revision import Revision
    from lockstep.reader import read_interface

    revision = Revision.of((await read_interface(mcp.url, timeout=10)).interface)
    manifest = build_manifest(revision, name="weather", namespace=namespace, selector={"app": "weather"})
    change(manifest)
    with pytest.raises(ControlPlaneError, match="denied the request") as refused:
        apply(control_plane, manifest)
    assert expected in str(refused.value)
