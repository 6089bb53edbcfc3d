"""Two replicas with kopf peering: only the leader answers reports and writes conditions."""

from __future__ import annotations

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


def make_report() -> dict[str, object]:
    from lockstep.core import Interface
    from lockstep.core.report import Observation

    return Observation.of_interface(Interface.from_document({"tools": TOOLS}), "2026-11-22T02:00:00Z").to_dict()
