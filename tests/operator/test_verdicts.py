"""Each verdict the operator reaches from real reports: stale, unreachable, invalid, conflict, Audit,
FirstSeen, and a restart of the operator that flips nothing."""

from __future__ import annotations

import kmock
import pytest
from lockstep_testing.kmock_support import (
    CRD_RESOURCE,
    NAMESPACE,
    POISON,
    Emulator,
    RunningOperator,
    TlsFiles,
    TokenBook,
    create_objects,
    document_of,
    events_of,
    make_pod,
    make_resource,
    operator_config,
    pod_of,
    resource_status,
    run_operator,
    sidecar_for,
    verdict_of,
    wait_verdict,
    weather_server,
)
from lockstep_testing.mcp_servers import MutableServer, serve_mcp
from lockstep_testing.polling import eventually

pytestmark = pytest.mark.kmock(cls=Emulator)

RESOURCE_PATH = f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces"


def _pod_writes(emulator: Emulator) -> int:
    return len(emulator["patch", kmock.resource("v1/pods"), kmock.subresource("status")])


async def test_silent_pod_goes_stale_and_recovers_on_its_next_report(
        kmock: Emulator, tokens: TokenBook, operator: RunningOperator, tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        probe = {"interval": "1s", "timeout": "1s", "staleAfter": "2s"}
        await create_objects(kmock, make_resource([document_of(server)], probe=probe), make_pod("p1"))
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.probe(url))[1]["verdict"]["reason"] == "Verified"
        await wait_verdict(kmock, "p1", ("False", "ReportStale"))
        await eventually(lambda: resource_status(kmock).get("pods", {}).get("stale") == 1)
        assert resource_status(kmock)["phase"] == "Degraded"
        assert (await sidecar.probe(url))[1]["verdict"]["reason"] == "Verified"
        await wait_verdict(kmock, "p1", ("True", "Verified"))
        await eventually(lambda: events_of(kmock, "Pod", "p1") == ["Verified", "ReportStale", "Verified"])


async def test_unreachable_and_invalid_servers_fail_closed(
        kmock: Emulator, tokens: TokenBook, operator: RunningOperator, tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        await create_objects(kmock, make_resource([document_of(server)]), make_pod("p1"))
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.probe(url))[1]["verdict"]["reason"] == "Verified"
        server.add_tool(dict(server.tools[0]))  # the same tool name twice
        status, answer = await sidecar.probe(url)
        assert (status, answer["verdict"]["reason"]) == (202, "InterfaceInvalid")
        await wait_verdict(kmock, "p1", ("False", "InterfaceInvalid"))
    # The server is gone: the sidecar reports that it cannot reach it.
    status, answer = await sidecar.probe(url)
    assert (status, answer["verdict"]["reason"]) == (202, "ServerUnreachable")
    await wait_verdict(kmock, "p1", ("False", "ServerUnreachable"))
    await eventually(lambda: resource_status(kmock).get("pods", {}).get("unreachable") == 1)


async def test_two_resources_selecting_one_pod_is_a_conflict(
        kmock: Emulator, tokens: TokenBook, operator: RunningOperator, tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        await create_objects(kmock, make_resource([document_of(server)]), make_pod("p1"),
                             make_resource([document_of(server)], name="weather-copy"))
        cache = operator.operator.reconciler.cache  # type: ignore[union-attr]
        await eventually(lambda: cache.resource(NAMESPACE, "weather-copy") and cache.pod(NAMESPACE, "p1"))
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        status, answer = await sidecar.probe(url)
        assert (status, answer["verdict"]["reason"]) == (202, "Conflict")
        assert "weather, weather-copy" in answer["verdict"]["message"]
        await wait_verdict(kmock, "p1", ("False", "Conflict"))
        # Removing the duplicate resolves it at once, from the last report.
        async with kmock.delete(f"{RESOURCE_PATH}/weather-copy") as response:
            assert response.status == 200
        await wait_verdict(kmock, "p1", ("True", "Verified"))


async def test_binding_annotation_picks_one_resource(
        kmock: Emulator, tokens: TokenBook, operator: RunningOperator, tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        await create_objects(kmock, make_resource([document_of(server)]),
                             make_resource([document_of(server)], name="weather-copy"),
                             make_pod("p1", **{"lockstep.dev/interface": "weather-copy"}))
        cache = operator.operator.reconciler.cache  # type: ignore[union-attr]
        await eventually(lambda: cache.resource(NAMESPACE, "weather-copy") and cache.pod(NAMESPACE, "p1"))
        assert (await sidecar_for(operator, tokens, tls_files, "p1").probe(url))[1]["verdict"]["reason"] == "Verified"
        await eventually(lambda: resource_status(kmock, "weather-copy").get("pods", {}).get("verified") == 1)
        assert resource_status(kmock).get("pods", {}).get("total", 0) == 0


async def test_audit_records_drift_but_keeps_the_pod_ready(
        kmock: Emulator, tokens: TokenBook, operator: RunningOperator, tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        await create_objects(kmock, make_resource([document_of(server)], enforcement="Audit"), make_pod("p1"))
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.probe(url))[1]["verdict"]["reason"] == "Verified"
        server.update_tool("get_alerts", description=POISON)
        status, answer = await sidecar.probe(url)
        assert (status, answer["verdict"]["status"], answer["verdict"]["reason"]) == (202, "True", "Audit")
        assert "would be InterfaceChanged" in answer["verdict"]["message"]
        await wait_verdict(kmock, "p1", ("True", "Audit"))
        await eventually(lambda: resource_status(kmock).get("pods", {}).get("audit") == 1)
        status_now = resource_status(kmock)
        assert status_now["phase"] == "Drifted" and status_now["podsReady"] == "1/1"
        drifted = [entry for entry in status_now["observed"] if not entry["approved"]]
        assert [finding["name"] for finding in drifted[0]["findings"]] == ["get_alerts"]


async def test_first_seen_trusts_the_first_interface_and_never_writes_spec(
        kmock: Emulator, tokens: TokenBook, operator: RunningOperator, tls_files: TlsFiles) -> None:
    server = weather_server()
    async with serve_mcp(server) as url:
        await create_objects(kmock, make_resource([], approval="FirstSeen"), make_pod("p1"), make_pod("p2"))
        first, second = (sidecar_for(operator, tokens, tls_files, name) for name in ("p1", "p2"))
        assert (await first.probe(url))[1]["verdict"] == {
            "status": "True", "reason": "Verified",
            "message": first.answers[0][1]["verdict"]["message"]}
        assert "trusted on first use" in first.answers[0][1]["verdict"]["message"]
        await eventually(lambda: "trusted" in resource_status(kmock))
        trusted = resource_status(kmock)["trusted"]
        assert trusted["pod"] == "p1" and trusted["digest"].startswith("sha256:")
        server.update_tool("get_alerts", description=POISON)
        status, answer = await second.probe(url)  # a later, different interface is not trusted
        assert (status, answer["verdict"]["reason"]) == (202, "NotApproved")
        status, answer = await first.probe(url)
        assert (status, answer["verdict"]["reason"]) == (202, "InterfaceChanged")
        await wait_verdict(kmock, "p1", ("False", "InterfaceChanged"))
    spec = dict(kmock.objects[CRD_RESOURCE, NAMESPACE, "weather"])["spec"]
    assert "approved" not in spec
    operator_writes = [request for request in kmock["patch", kmock.resource(CRD_RESOURCE)]
                       if request.headers.get("User-Agent") == "lockstep-operator"]
    assert operator_writes and all(request.url.path.endswith("/status") for request in operator_writes)


async def test_restart_flips_nothing_and_keeps_judging(kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    server, other = weather_server(), MutableServer(tools=[{"name": "x", "inputSchema": {"type": "object"}}])
    async with serve_mcp(server) as url, serve_mcp(other) as other_url:
        await create_objects(kmock, make_resource([document_of(server)]), make_pod("good"), make_pod("bad"))
        async with run_operator(kmock, operator_config(tls_files)) as operator:
            cache = operator.operator.reconciler.cache  # type: ignore[union-attr]
            await eventually(lambda: cache.pod(NAMESPACE, "bad") and cache.resource(NAMESPACE, "weather"))
            await sidecar_for(operator, tokens, tls_files, "good").probe(url)
            await sidecar_for(operator, tokens, tls_files, "bad").probe(other_url)
            await eventually(lambda: resource_status(kmock).get("pods", {}).get("drifted") == 1
                           and resource_status(kmock).get("pods", {}).get("verified") == 1)
        conditions = {name: pod_of(kmock, name)["status"]["conditions"] for name in ("good", "bad")}
        writes, status = _pod_writes(kmock), resource_status(kmock)

        async with run_operator(kmock, operator_config(tls_files)) as operator:
            reconciler = operator.operator.reconciler
            assert reconciler is not None and reconciler.synced.is_set()
            # A report with the same interface after the restart changes nothing either.
            assert (await sidecar_for(operator, tokens, tls_files, "good").probe(url))[1]["verdict"]["reason"] \
                == "Verified"
            await reconciler_flushed(operator)
            assert _pod_writes(kmock) == writes
            assert {name: pod_of(kmock, name)["status"]["conditions"] for name in ("good", "bad")} == conditions
            assert resource_status(kmock)["observed"] == status["observed"]
            assert resource_status(kmock)["phase"] == "Drifted"

            # Approving the other interface re-judges the silent pod from what the cluster remembers.
            approved = make_resource([document_of(server), {"tools": other.tools}])["spec"]["approved"]
            async with kmock.patch(f"{RESOURCE_PATH}/weather", json={"spec": {"approved": approved}}) as response:
                assert response.status == 200
            await wait_verdict(kmock, "bad", ("True", "Verified"))
            assert verdict_of(kmock, "good") == ("True", "Verified")


async def reconciler_flushed(operator: RunningOperator) -> None:
    """Wait until the operator has no status left to write (its flush timer ran)."""
    reconciler = operator.operator.reconciler
    assert reconciler is not None
    await eventually(lambda: not reconciler.state.dirty)
