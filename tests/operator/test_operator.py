"""The operator end to end against kmock: real kopf, a real MCP server read by the core's live
reader, real reports over HTTPS, and the pod conditions, status, Events and metrics that result."""

from __future__ import annotations

import pytest
from lockstep_testing.kmock_support import (
    KUBELET_CONDITIONS,
    MERGE_PATCH,
    NAMESPACE,
    POISON,
    TOOLS,
    Emulator,
    RunningOperator,
    TlsFiles,
    TokenBook,
    condition_of,
    create_objects,
    document_of,
    events_of,
    make_pod,
    make_resource,
    metrics_text,
    pod_of,
    resource_status,
    sidecar_for,
    wait_verdict,
    weather_server,
)
from lockstep_testing.mcp_servers import serve_mcp
from lockstep_testing.polling import eventually

from lockstep.core import Interface
from lockstep.core.revision import Revision

pytestmark = pytest.mark.kmock(cls=Emulator)


async def test_drift_isolates_and_approval_restores(kmock: Emulator, tokens: TokenBook, operator: RunningOperator,
                                                    tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        await create_objects(kmock, make_resource([document_of(server)]), make_pod("p1"), make_pod("p2"))
        sidecars = [sidecar_for(operator, tokens, tls_files, name) for name in ("p1", "p2")]

        for sidecar in sidecars:
            status, answer = await sidecar.probe(url)
            assert (status, answer["verdict"]["status"], answer["verdict"]["reason"]) == (202, "True", "Verified")
        await wait_verdict(kmock, "p1", ("True", "Verified"))
        await wait_verdict(kmock, "p2", ("True", "Verified"))
        assert [c for c in pod_of(kmock, "p1")["status"]["conditions"] if c["type"] != condition_of(
            pod_of(kmock, "p1"))["type"]] == KUBELET_CONDITIONS  # other owners' conditions kept
        await eventually(lambda: resource_status(kmock).get("pods", {}).get("verified") == 2)
        assert resource_status(kmock)["phase"] == "Verified"
        assert resource_status(kmock)["pods"] >= {"total": 2, "verified": 2, "drifted": 0}

        # A rug pull: the server changes a tool's description at run time.
        server.update_tool("get_alerts", description=POISON)
        for sidecar in sidecars:
            status, answer = await sidecar.probe(url)
            assert status == 202 and answer["verdict"]["reason"] == "InterfaceChanged"
            assert "tool get_alerts changed (description)" in answer["verdict"]["message"]
        await wait_verdict(kmock, "p1", ("False", "InterfaceChanged"))
        await wait_verdict(kmock, "p2", ("False", "InterfaceChanged"))
        await eventually(lambda: resource_status(kmock).get("pods", {}).get("drifted") == 2)
        assert resource_status(kmock)["phase"] == "Drifted"
        observed = {entry["digest"]: entry for entry in resource_status(kmock)["observed"]}
        drifted = observed[Revision.of(Interface.from_document(document_of(server))).aggregate]
        assert drifted["approved"] is False and drifted["pods"] == ["p1", "p2"]
        assert [(f["kind"], f["name"], f["change"], f["severity"]) for f in drifted["findings"]] == \
            [("tool", "get_alerts", "changed", "high")]
        kept = {tool["name"]: tool for tool in drifted["definitions"]["tools"]}  # kept for review
        assert kept["get_alerts"]["description"] == POISON
        await eventually(lambda: events_of(kmock, "Pod", "p1") == ["Verified", "InterfaceChanged"])
        metrics = await metrics_text(operator)
        assert ('lockstep_drift_findings{change="changed",component_kind="tool",interface="weather",'
                'namespace="agents",severity="high"} 1.0') in metrics
        assert 'lockstep_pods{interface="weather",namespace="agents",state="drifted"} 2.0' in metrics

        # Approving the new revision (a merged PR) re-judges every pod at once, with no new report.
        new_approved = make_resource([TOOLS and {"instructions": "Weather tools.", "tools": TOOLS},
                                  document_of(server)])["spec"]["approved"]
        async with kmock.patch(f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces/weather",
                               json={"metadata": {"generation": 2}, "spec": {"approved": new_approved}}) as response:
            assert response.status == 200
        await wait_verdict(kmock, "p1", ("True", "Verified"))
        await wait_verdict(kmock, "p2", ("True", "Verified"))
        assert [len(sidecar.answers) for sidecar in sidecars] == [2, 2]
        await eventually(lambda: resource_status(kmock).get("phase") == "Verified" and resource_status(kmock)["observedGeneration"] == 2)
        await eventually(lambda: "Approved" in events_of(kmock, "MCPServerInterface", "weather"))
        ready = {c["type"]: c for c in resource_status(kmock)["conditions"]}["Ready"]
        assert (ready["status"], ready["observedGeneration"]) == ("True", 2)

    # Every write was a merge patch that said so (a real API server refuses a dict sent as a JSON Patch),
    # and a verdict that did not change was not written again.
    patches = [request for request in kmock["patch"] if request.headers.get("User-Agent") == "lockstep-operator"]
    assert patches and {request.headers["Content-Type"] for request in patches} == {MERGE_PATCH}
    pod_writes = kmock["patch", kmock.resource("v1/pods"), kmock.subresource("status")]
    assert len(pod_writes) == 6  # p1, p2 x (Verified, InterfaceChanged, Verified)
    resource_writes = [request for request in patches if request.resource.plural == "mcpserverinterfaces"]
    assert resource_writes and all(request.url.path.endswith("/status") for request in resource_writes)

    metrics = await metrics_text(operator)
    assert 'lockstep_pods{interface="weather",namespace="agents",state="verified"} 2.0' in metrics
    assert "lockstep_drift_findings{" not in metrics  # the drifted revision is approved now
    assert 'lockstep_last_verification_timestamp_seconds{interface="weather",namespace="agents"}' in metrics
    assert 'lockstep_verifications_total{interface="weather",namespace="agents",result="InterfaceChanged"} 2.0' \
        in metrics
    assert 'lockstep_report_duration_seconds_count{outcome="accepted"} 4.0' in metrics
