"""Owner affinity: with several replicas, the replica that judged a report names its address in the answer
(``reportTo``), and the sidecar sends the pod's next report straight there instead of through the Service,
where half the reports would reach the other replica and cost a relay (issue 18). The address is only a
hint: the certificate there must carry the Service's name, and any failure sends the report through the
Service again."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import web
from lockstep_testing.kmock_support import (
    NAMESPACE,
    TOOLS,
    Emulator,
    TlsFiles,
    TokenBook,
    create_objects,
    make_pod,
    make_resource,
    make_tls_files,
    operator_config,
    run_operator,
    verdict_of,
)

from lockstep_testing.loopback import host_address
from lockstep_testing.polling import eventually
from lockstep_testing.replicas import PEERING, declare_peering, resource_owned_by
from lockstep_testing.reports import observation

from lockstep.sidecar.metrics import SidecarMetrics
from lockstep.sidecar.reporter import Reporter

from lockstep.core.wire import ReplicaAddress

pytestmark = pytest.mark.kmock(cls=Emulator)

LOW, HIGH = 10, 20
#: The name the sidecars reach the report Service by; the test certificate carries it (and 127.0.0.1).
SERVICE_NAME = "localhost"


async def _deliver(reporter: Reporter) -> int:
    await reporter._deliver(observation(at="now"))
    assert reporter.last_delivery is not None
    return reporter.last_delivery.status


async def test_the_sidecar_reports_straight_to_the_owner_and_through_the_service_when_it_is_gone(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles, tmp_path: Path) -> None:
    await declare_peering(kmock)
    name = resource_owned_by(LOW, [LOW, HIGH])
    await create_objects(kmock, make_resource([{"tools": TOOLS}], name=name, selector={"matchLabels": {"app": "a"}}),
                         make_pod("p1", {"app": "a"}))
    token = tmp_path / "token"
    token.write_text(tokens.issue(NAMESPACE, "p1", "uid-p1"))
    sent_to: list[str] = []

    async def record(request: httpx2.Request) -> None:
        sent_to.append(f"{request.url.host}:{request.url.port}")

    common = {"peering_name": PEERING, "advertise_address": host_address(), "report_host": "0.0.0.0", "operator_ca_path": str(tls_files.cert)}
    async with run_operator(kmock, operator_config(tls_files, peering_priority=LOW, **common)) as low, \
            run_operator(kmock, operator_config(tls_files, peering_priority=HIGH, **common)) as high, \
            httpx2.AsyncClient(verify=tls_files.client_context(), event_hooks={"request": [record]}) as client:
        for replica in (low, high):
            membership = replica.operator.membership
            assert membership is not None
            await eventually(lambda: len(membership.members) == 2, timeout=20)  # noqa: B023
        # The "Service" here reaches the replica that does not own the pod.
        service = f"https://{SERVICE_NAME}:{high.report_port}/v1/reports"
        reporter = Reporter(service, token, client, SidecarMetrics())
        relay = high.operator.report_server.relay  # type: ignore[union-attr]
        assert relay is not None

        assert await _deliver(reporter) == 202
        assert relay.relayed == 1
        assert str(reporter.report_to) == f"{host_address()}:{low.report_port}"  # the owner named itself
        for _ in range(3):
            assert await _deliver(reporter) == 202
        assert relay.relayed == 1  # none of them took the second hop
        assert sent_to == [f"{SERVICE_NAME}:{high.report_port}"] + [f"{host_address()}:{low.report_port}"] * 3
        assert verdict_of(kmock, "p1") == ("True", "Verified")

        # The owner forgets the definitions (as after its restart): its 428 and the full report that answers
        # it both go to the owner's address.
        for resource in low.operator.reconciler.state.resources.values():  # type: ignore[union-attr]
            resource.held.clear()
        del sent_to[:]
        assert await _deliver(reporter) == 202
        assert sent_to == [f"{host_address()}:{low.report_port}"] * 2
        assert relay.relayed == 1

        # The owner goes away (a rolling update): the report meant for it goes through the Service at once,
        # and the remaining replica, alone now, names no address.
        low.stop.set()
        high_reconciler = high.operator.reconciler
        assert high_reconciler is not None
        await eventually(lambda: high_reconciler.ownership.owns_resource((NAMESPACE, name)), timeout=30)
        del sent_to[:]
        assert await _deliver(reporter) == 202
        # (Twice through the Service: the new owner asks for the definitions, 428, as after any hand-over.)
        assert sent_to == [f"{host_address()}:{low.report_port}"] + [f"{SERVICE_NAME}:{high.report_port}"] * 2
        assert reporter.report_to is None
        assert (NAMESPACE, "p1") in high_reconciler.state.tracks


async def test_an_address_reused_by_another_server_gets_no_token(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles, tmp_path: Path) -> None:
    """The owner's pod is gone and its IP now belongs to some other pod listening on the same port. The
    sidecar still holds the address from the owner's last answer; it must not hand that pod its token
    or believe its answer. The server there cannot show a certificate for the Service's name from the
    operator's CA, so the report goes through the Service, and the pod keeps its verdict."""
    await create_objects(kmock, make_resource([{"tools": TOOLS}]), make_pod("p1"))
    token = tmp_path / "token"
    token.write_text(tokens.issue(NAMESPACE, "p1", "uid-p1"))
    received: list[str] = []

    async def steal(request: web.Request) -> web.Response:
        received.append(request.headers.get("Authorization", ""))
        return web.json_response({"verdict": {"status": "True", "reason": "Verified", "message": "trust me"},
                                  "digests": True, "approved": {"ignore": ["/**"], "components": []}}, status=202)

    (tmp_path / "impostor").mkdir()
    impostor = make_tls_files(tmp_path / "impostor")  # its own CA; a certificate for localhost and 127.0.0.1
    app = web.Application()
    app.router.add_post("/v1/reports", steal)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(impostor.cert), str(impostor.key))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    delivered: list[Any] = []
    try:
        async with run_operator(kmock, operator_config(tls_files)) as running, \
                httpx2.AsyncClient(verify=tls_files.client_context()) as client:
            reporter = Reporter(f"https://{SERVICE_NAME}:{running.report_port}/v1/reports", token, client,
                                SidecarMetrics(), on_delivered=delivered.append)
            reporter.report_to = ReplicaAddress("127.0.0.1", port)  # what the last answer named (built past parse)
            assert await _deliver(reporter) == 202
            assert received == []
            assert delivered[-1].verdict.message != "trust me"
            assert verdict_of(kmock, "p1") == ("True", "Verified")
    finally:
        await runner.cleanup()


async def test_an_address_that_failed_is_not_tried_again_for_a_while(tmp_path: Path) -> None:
    """A path to the replica's address that does not work (a NetworkPolicy, a firewall) must not cost each
    report a failed connection: after one failure the sidecar reports through the Service, however often
    the answers name that address."""
    token = tmp_path / "token"
    token.write_text("token")
    sent_to: list[str] = []

    def cluster(request: httpx2.Request) -> httpx2.Response:
        sent_to.append(str(request.url.host))
        if request.url.host == "10.244.0.7":
            raise httpx2.ConnectError("no route to host", request=request)
        return httpx2.Response(202, json={"verdict": {"status": "True", "reason": "Verified", "message": ""},
                                          "digests": True, "reportTo": "10.244.0.7:8443"})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(cluster)) as client:
        reporter = Reporter("https://lockstep-reports.lockstep-system.svc/v1/reports", token, client,
                            SidecarMetrics())
        for _ in range(4):
            assert await _deliver(reporter) == 202
    service = "lockstep-reports.lockstep-system.svc"
    assert sent_to == [service, "10.244.0.7", service, service, service]
