"""Two replicas of one release: each watches everything and serves reports, and each MCPServerInterface
is owned by one of them (lockstep.operator.replicas.membership), which alone judges its pods and writes them; a
report for a pod the other owns is relayed to the owner."""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp
import kmock
import pytest
from lockstep_testing.kmock_support import (
    NAMESPACE,
    TOOLS,
    Emulator,
    RunningOperator,
    TlsFiles,
    TokenBook,
    create_objects,
    jwt_shaped,
    make_pod,
    make_resource,
    operator_config,
    run_operator,
    sidecar_for,
    verdict_of,
)
from lockstep_testing.loopback import host_address
from lockstep_testing.polling import eventually
from lockstep_testing.replicas import PEERING, declare_peering, resource_owned_by
from lockstep_testing.reports import report_body


pytestmark = pytest.mark.kmock(cls=Emulator)

LOW, HIGH = 10, 20


async def _ready(operator: RunningOperator, tls: TlsFiles) -> int:
    connector = aiohttp.TCPConnector(ssl=tls.client_context())
    async with aiohttp.ClientSession(connector=connector) as session, \
            session.get(f"https://127.0.0.1:{operator.report_port}/readyz") as response:
        return response.status


def _pod_writes(emulator: Emulator, pod: str) -> int:
    return len([request for request in emulator["patch", kmock.resource("v1/pods"), kmock.subresource("status")]
                if f"/pods/{pod}/" in str(request.url)])


async def test_every_replica_serves_and_each_resource_has_one_writer(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """Before issue 18: only the kopf leader served reports; the standby answered 503, and a new pod once
    waited 104 s behind eleven of them on a real node."""
    await declare_peering(kmock)
    low_name, high_name = resource_owned_by(LOW, [LOW, HIGH]), resource_owned_by(HIGH, [LOW, HIGH])
    await create_objects(
        kmock, make_resource([{"tools": TOOLS}], name=low_name, selector={"matchLabels": {"app": "low"}}),
        make_resource([{"tools": TOOLS}], name=high_name, selector={"matchLabels": {"app": "high"}}),
        make_pod("p-low", {"app": "low"}), make_pod("p-high", {"app": "high"}))
    common = {"peering_name": PEERING, "advertise_address": host_address(), "report_host": "0.0.0.0", "operator_ca_path": str(tls_files.cert)}
    async with run_operator(kmock, operator_config(tls_files, peering_priority=LOW, **common)) as low, \
            run_operator(kmock, operator_config(tls_files, peering_priority=HIGH, **common)) as high:
        for replica in (low, high):
            membership = replica.operator.membership
            assert membership is not None
            await eventually(lambda: len(membership.members) == 2, timeout=20)  # noqa: B023
        status = kmock.objects["kopf.dev/v1/clusterkopfpeerings", None, PEERING]["status"]
        assert {entry["endpoint"] for entry in status.values()} == {
            f"{host_address()}:{low.report_port}", f"{host_address()}:{high.report_port}"}
        assert await _ready(low, tls_files) == 200 and await _ready(high, tls_files) == 200

        # Each pod's report, sent to the replica that does not own it, is judged by the one that does.
        for pod, sent_to, owned_by in (("p-low", high, low), ("p-high", low, high)):
            sidecar = sidecar_for(sent_to, tokens, tls_files, pod)
            answer_status, answer = await sidecar.post(report_body())
            assert (answer_status, answer["verdict"]["reason"]) == (202, "Verified")
            await eventually(lambda: verdict_of(kmock, pod) == ("True", "Verified"))  # noqa: B023
            assert (NAMESPACE, pod) in owned_by.operator.reconciler.state.tracks  # type: ignore[union-attr]
            assert (NAMESPACE, pod) not in sent_to.operator.reconciler.state.tracks  # type: ignore[union-attr]
            assert sent_to.operator.report_server.relay.relayed >= 1  # type: ignore[union-attr]
            # A replay is refused by the owner, whichever replica it reaches.
            replay = json.dumps({**sidecar.stamp(report_body()), "sequence": 1}).encode()
            assert (await sidecar.post(None, raw=replay))[1]["reason"] == "Replayed"
        # A report relayed already is never relayed again (replicas that disagree for a moment on owners).
        status_code, answer = await sidecar_for(high, tokens, tls_files, "p-low").post(
            report_body(), headers={"Lockstep-Relayed-For": "10.0.0.1"})
        assert (status_code, answer["reason"]) == (503, "NotServing")
        assert _pod_writes(kmock, "p-low") == 1 and _pod_writes(kmock, "p-high") == 1

        # The low replica stops (a rolling update): the high one takes its resource over from what the
        # cluster holds, and the pod's next report is judged there, with no write (nothing flipped).
        low.stop.set()
        high_reconciler = high.operator.reconciler
        assert high_reconciler is not None
        await eventually(lambda: high_reconciler.ownership.owns_resource((NAMESPACE, low_name)), timeout=30)
        answer_status, answer = await sidecar_for(high, tokens, tls_files, "p-low").post(report_body())
        assert (answer_status, answer["verdict"]["reason"]) == (202, "Verified")
        assert (NAMESPACE, "p-low") in high_reconciler.state.tracks
        assert _pod_writes(kmock, "p-low") == 1
        assert verdict_of(kmock, "p-low") == ("True", "Verified")


async def test_a_relayed_for_address_is_believed_only_from_a_live_replica(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """The per-address limit on unknown tokens cannot be dodged by naming another address: the header
    counts only from a live replica's address (the relay), never from a caller."""
    await create_objects(kmock, make_resource([{"tools": TOOLS}]), make_pod("p1"))
    config = operator_config(tls_files, source_rate=0.001, source_burst=1)
    async with run_operator(kmock, config) as running:
        sidecar = sidecar_for(running, tokens, tls_files, "p1")
        first = await sidecar.post(report_body(), token=jwt_shaped({"n": 1}), headers={"Lockstep-Relayed-For": "10.9.9.1"})
        second = await sidecar.post(report_body(), token=jwt_shaped({"n": 2}), headers={"Lockstep-Relayed-For": "10.9.9.2"})
        assert first[0] == 401 and second == (429, second[1]) and second[1]["reason"] == "RateLimited"


async def test_a_forged_peering_entry_never_receives_a_relayed_token(tmp_path: Any, tls_files: TlsFiles) -> None:
    """Whoever can patch the peering object can add an entry naming their own address, and win some
    resources. The relay sends them nothing: it verifies the owner with the operator's CA and the
    Service's name before a byte of the report (or its bearer token) leaves."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request
    from lockstep_testing.kmock_support import make_tls_files

    from lockstep.operator.replicas.relay import RelayFailed, ReportRelay

    received: list[str] = []

    async def steal(request: web.Request) -> web.Response:
        received.append(request.headers.get("Authorization", ""))
        return web.json_response({}, status=202)

    impostor = make_tls_files(tmp_path)  # a certificate of its own, for 127.0.0.1 too
    app = web.Application()
    app.router.add_post("/v1/reports", steal)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(impostor.cert), str(impostor.key))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    relay = ReportRelay(report_url="https://127.0.0.1:8443", ca_path=str(tls_files.cert), tls=True)
    try:
        request = make_mocked_request("POST", "/v1/reports", headers={"Authorization": "Bearer pod-token"})
        with pytest.raises(RelayFailed):
            await relay.send(request, b"{}", f"127.0.0.1:{port}")
        assert received == []
    finally:
        await relay.close()
        await runner.cleanup()
