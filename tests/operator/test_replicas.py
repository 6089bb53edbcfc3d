"""Two replicas with kopf peering: only the leader judges and writes conditions; a standby that knows
where the leader is relays the reports it gets to it."""

from __future__ import annotations

import json

import aiohttp
import pytest
from lockstep_testing.kmock_support import (
    TOOLS,
    Emulator,
    RunningOperator,
    TlsFiles,
    TokenBook,
    create_objects,
    make_pod,
    make_resource,
    operator_config,
    run_operator,
    sidecar_for,
    verdict_of,
    wait_for,
)

pytestmark = pytest.mark.kmock(cls=Emulator)

PEERING = "lockstep"


async def _ready(operator: RunningOperator, tls: TlsFiles) -> int:
    connector = aiohttp.TCPConnector(ssl=tls.client_context())
    async with aiohttp.ClientSession(connector=connector) as session, \
            session.get(f"https://127.0.0.1:{operator.report_port}/readyz") as response:
        return response.status


async def test_only_the_leader_serves_reports(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    kmock.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
        kind="ClusterKopfPeering", singular="clusterkopfpeering", namespaced=False,
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"})
    async with kmock.post("/apis/kopf.dev/v1/clusterkopfpeerings",
                          json={"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                                "metadata": {"name": PEERING}}) as response:
        assert response.status < 300
    await create_objects(kmock, make_resource([{"tools": TOOLS}]), make_pod("p1"))
    low = operator_config(tls_files, peering_name=PEERING, peering_priority=10)
    high = operator_config(tls_files, peering_name=PEERING, peering_priority=20)
    async with run_operator(kmock, low) as standby, run_operator(kmock, high) as leader:
        # Both are listed in the peering object; the standby reads that it does not lead.
        await wait_for(lambda: len(dict(kmock.objects["kopf.dev/v1/clusterkopfpeerings", None, PEERING])
                                   .get("status") or {}) == 2, timeout=15)
        standby_leads = standby.operator.reconciler.is_leader  # type: ignore[union-attr]
        await wait_for(lambda: not standby_leads(), timeout=15)
        assert await _ready(standby, tls_files) == 503
        assert await _ready(leader, tls_files) == 200

        status, answer = await sidecar_for(standby, tokens, tls_files, "p1").post({"observedAt": "x"})
        assert (status, answer["reason"]) == (503, "NotServing")
        report = make_report()
        status, answer = await sidecar_for(leader, tokens, tls_files, "p1").post(report)
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")
        await wait_for(lambda: verdict_of(kmock, "p1") == ("True", "Verified"))
        assert len(kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")]) == 1

        # The leader stops (a rolling update): the standby takes over, from what the cluster holds.
        leader.stop.set()
        await wait_for(lambda: standby_leads(), timeout=30)
        assert await _ready(standby, tls_files) == 200
        status, answer = await sidecar_for(standby, tokens, tls_files, "p1").post(make_report())
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")
        assert len(kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")]) == 1  # nothing flipped


async def _peering(kmock: Emulator) -> None:
    kmock.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
        kind="ClusterKopfPeering", singular="clusterkopfpeering", namespaced=False,
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"})
    async with kmock.post("/apis/kopf.dev/v1/clusterkopfpeerings",
                          json={"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                                "metadata": {"name": PEERING}}) as response:
        assert response.status < 300


async def test_a_standby_relays_reports_to_the_leader(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """Before issue 18: a report that the Service sent to the standby was answered 503, and a new pod
    waited for a retry that reached the leader (104 s behind eleven 503s once, on a real node)."""
    await _peering(kmock)
    await create_objects(kmock, make_resource([{"tools": TOOLS}]), make_pod("p1"))
    common = {"peering_name": PEERING, "advertise_address": "127.0.0.1", "operator_ca_path": str(tls_files.cert)}
    low = operator_config(tls_files, peering_priority=10, **common)
    high = operator_config(tls_files, peering_priority=20, **common)
    async with run_operator(kmock, low) as standby, run_operator(kmock, high) as leader:
        standby_server = standby.operator.report_server
        assert standby_server is not None and standby_server.leadership is not None
        await wait_for(lambda: standby_server.leadership.leader_endpoint == f"127.0.0.1:{leader.report_port}",
                       timeout=20)
        annotations = kmock.objects["kopf.dev/v1/clusterkopfpeerings", None, PEERING]["metadata"]["annotations"]
        assert annotations == {"report-endpoint.lockstep.dev/10": f"127.0.0.1:{standby.report_port}",
                               "report-endpoint.lockstep.dev/20": f"127.0.0.1:{leader.report_port}"}
        assert await _ready(standby, tls_files) == 200

        sidecar = sidecar_for(standby, tokens, tls_files, "p1")
        status, answer = await sidecar.post(make_report())
        assert (status, answer["verdict"]["reason"]) == (202, "Verified")
        await wait_for(lambda: verdict_of(kmock, "p1") == ("True", "Verified"))
        # The leader judged and wrote it (the standby's watches are paused: it could not have).
        assert standby_server.relay is not None and standby_server.relay.relayed == 1
        assert leader.operator.reconciler.tracks  # type: ignore[union-attr]
        assert not standby.operator.reconciler.tracks  # type: ignore[union-attr]
        # Refusals come back as the leader gave them: a replay through the standby is still a replay.
        status, answer = await sidecar.post(None, raw=json.dumps(sidecar.stamp(make_report()) | {"sequence": 1}).encode())
        assert (status, answer["reason"]) == (409, "Replayed")
        # A relayed report is never relayed again (two replicas that both think the other leads).
        status, answer = await sidecar.post(make_report(), headers={"Lockstep-Relayed-For": "10.0.0.1"})
        assert (status, answer["reason"]) == (503, "NotServing")


def make_report() -> dict[str, object]:
    from lockstep.core import Interface
    from lockstep.core.report import Observation

    return Observation.of_interface(Interface.from_document({"tools": TOOLS}), "2026-11-22T02:00:00Z").to_dict()
