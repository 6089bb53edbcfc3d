"""The trust boundary on the operator's side (docs/threat-model.md, "Trust boundary"): nothing a namespace
editor or a hostile pod can write or send makes a verdict that fails to land be forgotten, holds a pod
Ready, or costs the report endpoint more than a bounded amount before the caller is known.

Each test is an attack from the security review (../shared/notes/security-review/FINDINGS.md) run against
the real operator on kmock: F1 (a stamp or a write error that drops a False), F2 (a condition someone else
writes), F4/F7 (the endpoint before identity), F3/F6 (forged peering entries), F9 (reportTo), F11 (a
report over the body limit). The admission routes (exec, TokenRequest, pod specs) are tested on the real
control plane and the real node (tests/envtest/test_tenant.py, tests/e2e/test_tenant.py).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from lockstep_testing.kmock_support import (
    MERGE_PATCH,
    NAMESPACE,
    POISON,
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
    pod_of,
    run_operator,
    sidecar_for,
    verdict_of,
    wait_verdict,
)
from lockstep_testing.polling import eventually
from lockstep_testing.reports import report_body

from lockstep.core.names import REPORT_STAMP_ANNOTATION
from lockstep.operator.kube import KubeApiError

pytestmark = pytest.mark.kmock(cls=Emulator)

GOOD = {"tools": TOOLS}
BAD = {"tools": [TOOLS[0], {**TOOLS[1], "description": POISON}]}
FAST = {"interval": "1s", "timeout": "1s", "staleAfter": "2s"}


async def _foreign_status_patch(emulator: Emulator, pod: str, condition: dict[str, Any]) -> None:
    """What a user with pods/status rights does: a merge patch of the pod's conditions, not as the operator."""
    import aiohttp

    body = pod_of(emulator, pod)
    others = [c for c in body["status"].get("conditions", []) if c["type"] != condition["type"]]
    async with aiohttp.ClientSession() as session, session.patch(
            f"{str(emulator.url).rstrip('/')}/api/v1/namespaces/{NAMESPACE}/pods/{pod}/status",
            data=json.dumps({"status": {"conditions": [*others, condition]}}),
            headers={"Content-Type": MERGE_PATCH, "User-Agent": "kubectl/edit"}) as response:
        assert response.status == 200, await response.text()


async def _foreign_annotation(emulator: Emulator, pod: str, value: str) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.patch(
            f"{str(emulator.url).rstrip('/')}/api/v1/namespaces/{NAMESPACE}/pods/{pod}",
            data=json.dumps({"metadata": {"annotations": {REPORT_STAMP_ANNOTATION: value}}}),
            headers={"Content-Type": MERGE_PATCH, "User-Agent": "kubectl/edit"}) as response:
        assert response.status == 200, await response.text()


class FailingWrites:
    """Makes the operator's pods/status writes fail with the given statuses, in order, then pass (the
    operator's KubeClient raises KubeApiError for an error answer, as it does for the real API server)."""

    def __init__(self, operator: RunningOperator, statuses: list[int]) -> None:
        assert operator.operator.reconciler is not None
        self.client = operator.operator.reconciler.client
        self.statuses = list(statuses)
        self.failed: list[int] = []
        self._original = self.client.merge_patch

    async def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        if path.endswith("/status") and "/pods/" in path and self.statuses:
            status = self.statuses.pop(0)
            self.failed.append(status)
            raise KubeApiError(status, f"injected {status}")
        return await self._original(path, body)

    def __enter__(self) -> FailingWrites:
        self.client.merge_patch = self.merge_patch  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: Any) -> None:
        self.client.merge_patch = self._original  # type: ignore[method-assign]


# ---------------------------------------------------------------- fail closed on every write

async def test_a_false_that_the_api_refuses_is_written_once_it_recovers(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F1: the False write meets 409 (four times: the guarded write gives up), 422 and 500, then the API
    recovers: the pod is False within one retry interval, and no report is lost."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files, write_retry_interval=0.2)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.post(report_body(at="now", document=GOOD)))[1]["verdict"]["reason"] == "Verified"
        with FailingWrites(operator, [409, 409, 409, 409, 422, 500, 500]) as failing:
            status, answer = await sidecar.post(report_body(at="now", document=BAD))
            assert (status, answer["reason"]) == (503, "NotWritten")  # the sidecar sends it again
            await wait_verdict(kmock, "p1", ("False", "InterfaceChanged"))
        assert failing.failed == [409, 409, 409, 409, 422, 500, 500]
        reconciler = operator.operator.reconciler
        assert reconciler is not None and not reconciler.state.unwritten
        assert reconciler.metrics.verdict_writes_failed._value.get() >= 2


async def test_a_report_stale_that_does_not_land_is_retried_until_it_does(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F1: a silent pod's ReportStale that the API refuses is not dropped: the pod does not stay Ready."""
    await create_objects(kmock, make_resource([GOOD], probe=FAST), make_pod("p1"))
    config = operator_config(tls_files, write_retry_interval=0.2, stale_check_interval=0.2)
    async with run_operator(kmock, config) as operator:
        assert (await sidecar_for(operator, tokens, tls_files, "p1").post(report_body(at="now", document=GOOD)))[0] == 202
        with FailingWrites(operator, [500, 422, 403, 500]) as failing:
            await wait_verdict(kmock, "p1", ("False", "ReportStale"))
        assert failing.failed == [500, 422, 403, 500]


async def test_a_stamp_the_api_will_not_take_does_not_hold_back_the_false(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """A pod whose annotations the API server refuses to grow (422) still gets its False, without the stamp."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.post(report_body(at="now", document=GOOD)))[0] == 202
        seen: list[bool] = []
        reconciler = operator.operator.reconciler
        assert reconciler is not None
        original = reconciler.client.merge_patch

        async def refuse_annotations(path: str, body: dict[str, Any]) -> Any:
            if path.endswith("/status") and "/pods/" in path:
                annotated = bool((body.get("metadata") or {}).get("annotations"))
                seen.append(annotated)
                if annotated:
                    raise KubeApiError(422, "metadata.annotations: Too long: must have at most 262144 bytes")
            return await original(path, body)

        reconciler.client.merge_patch = refuse_annotations  # type: ignore[method-assign]
        status, answer = await sidecar.post(report_body(at="now", document=BAD))
        assert (status, answer["verdict"]["reason"]) == (202, "InterfaceChanged")
        assert verdict_of(kmock, "p1") == ("False", "InterfaceChanged")
        assert seen == [True, False]


async def test_a_pod_admitted_past_the_rules_is_never_verified(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F5: a pod with hostPID (admitted while the webhook was off, or in a namespace it does not cover)
    reports the approved interface: it stays False, PodOutsidePolicy, since another container may hold
    its sidecar's token; the same report from a clean pod is Verified."""
    hostile = make_pod("p1")
    hostile["spec"] = {"hostPID": True, "containers": [{"name": "app", "image": "app:1"}]}
    await create_objects(kmock, make_resource([GOOD]), hostile, make_pod("p2"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        status, answer = await sidecar_for(operator, tokens, tls_files, "p1").post(report_body(at="now", document=GOOD))
        assert (status, answer["verdict"]["reason"]) == (202, "PodOutsidePolicy")
        assert "hostPID" in answer["verdict"]["message"]
        assert verdict_of(kmock, "p1") == ("False", "PodOutsidePolicy")
        assert (await sidecar_for(operator, tokens, tls_files, "p2").post(report_body(at="now", document=GOOD)))[1]["verdict"]["reason"] \
            == "Verified"


# ---------------------------------------------------------------- stamps Lockstep did not write

async def test_a_stamp_from_the_future_neither_locks_out_the_sidecar_nor_blocks_a_false(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F1/F5: a deployer annotates the pod with a stamp of a sidecar that starts in 2099. Genuine reports
    are still taken, a drift is still written False, and the stamp is replaced by Lockstep's."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.post(report_body(at="now", document=GOOD)))[0] == 202
        forged = json.dumps({"bootId": "f" * 32, "bootTime": "2099-01-01T00:00:00+00:00", "sequence": 1})
        await _foreign_annotation(kmock, "p1", forged)
        await eventually(lambda: pod_of(kmock, "p1")["metadata"]["annotations"][REPORT_STAMP_ANNOTATION] == forged)
        await asyncio.sleep(0.2)  # the watch event reaches the operator's cache
        status, answer = await sidecar.post(report_body(at="now", document=BAD))
        assert (status, answer["verdict"]["reason"]) == (202, "InterfaceChanged")
        assert verdict_of(kmock, "p1") == ("False", "InterfaceChanged")
        assert "2099" not in pod_of(kmock, "p1")["metadata"]["annotations"][REPORT_STAMP_ANNOTATION]
        assert (await sidecar.post(report_body(at="now", document=GOOD)))[1]["verdict"]["reason"] == "Verified"


async def test_a_report_from_a_sidecar_that_starts_in_the_future_is_refused(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """One report with bootTime in 2099 would otherwise make every later genuine report a replay."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        sidecar.boot_time = "2099-01-01T00:00:00+00:00"
        status, answer = await sidecar.post(report_body(at="now", document=GOOD))
        assert (status, answer["reason"]) == (400, "ClockSkew") and "future" in answer["message"]
        genuine = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await genuine.post(report_body(at="now", document=GOOD)))[1]["verdict"]["reason"] == "Verified"


# ---------------------------------------------------------------- conditions someone else writes

async def test_an_earlier_verified_written_back_on_a_tracked_pod_is_overwritten(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F2a: after a drift, someone with pods/status rights writes back Lockstep's own earlier Verified
    condition. The operator writes the False again at the watch event, without waiting for a report."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.post(report_body(at="now", document=GOOD)))[0] == 202
        verified = dict(next(c for c in pod_of(kmock, "p1")["status"]["conditions"]
                             if c["type"] == "lockstep.dev/interface-verified"))
        assert (await sidecar.post(report_body(at="now", document=BAD)))[1]["verdict"]["reason"] == "InterfaceChanged"
        await _foreign_status_patch(kmock, "p1", verified)
        await wait_verdict(kmock, "p1", ("False", "InterfaceChanged"))


async def test_a_foreign_condition_is_overwritten_even_when_reading_the_pod_fails(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """The read that tells a foreign write from a late event fails (500): the pod is not left carrying the
    foreign True; it goes to the retried writes and gets the verdict back."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files, write_retry_interval=0.2)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        assert (await sidecar.post(report_body(at="now", document=GOOD)))[0] == 202
        verified = dict(next(c for c in pod_of(kmock, "p1")["status"]["conditions"]
                             if c["type"] == "lockstep.dev/interface-verified"))
        assert (await sidecar.post(report_body(at="now", document=BAD)))[1]["verdict"]["reason"] == "InterfaceChanged"
        reconciler = operator.operator.reconciler
        assert reconciler is not None
        original, failed = reconciler.client.get, []

        async def failing_read(path: str) -> Any:
            if "/pods/" in path and not failed:
                failed.append(path)
                raise KubeApiError(500, "injected 500")
            return await original(path)

        reconciler.client.get = failing_read  # type: ignore[method-assign]
        await _foreign_status_patch(kmock, "p1", verified)
        await eventually(lambda: failed)
        await wait_verdict(kmock, "p1", ("False", "InterfaceChanged"))


async def test_a_true_written_on_a_silent_pod_is_overwritten(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F2b: the sidecar is silenced (a NetworkPolicy the deployer may create), the pod goes ReportStale,
    then someone writes True on it: the stale check no longer skips it; the watch event writes it back."""
    await create_objects(kmock, make_resource([GOOD], probe=FAST), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files, stale_check_interval=0.2)) as operator:
        assert (await sidecar_for(operator, tokens, tls_files, "p1").post(report_body(at="now", document=GOOD)))[0] == 202
        await wait_verdict(kmock, "p1", ("False", "ReportStale"))
        for _ in range(2):
            await _foreign_status_patch(kmock, "p1", {
                "type": "lockstep.dev/interface-verified", "status": "True", "reason": "Verified",
                "message": "trust me", "lastTransitionTime": "2026-01-01T00:00:00Z"})
            await wait_verdict(kmock, "p1", ("False", "ReportStale"))


# ---------------------------------------------------------------- the report endpoint before identity

def _client_context(tls_files: TlsFiles) -> ssl.SSLContext:
    return tls_files.client_context()


async def _raw_request(operator: RunningOperator, tls_files: TlsFiles, head: bytes, body: bytes = b"",
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", operator.report_port,
                                                   ssl=_client_context(tls_files), server_hostname="localhost")
    writer.write(head + body)
    await writer.drain()
    return reader, writer


async def test_tokens_of_any_shape_get_401_never_500_and_cost_no_review(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F7: a payload nested 6,000 deep, a token of 20 KiB, non-ASCII, empty parts: 401 without a
    TokenReview (the endpoint no longer reads a token's claims before the API server vouches for it)."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files)) as operator:
        sidecar = sidecar_for(operator, tokens, tls_files, "p1")
        import base64

        deep = base64.urlsafe_b64encode(b"[" * 6000 + b"]" * 6000).decode().rstrip("=")
        shapes = [f"eyJhbGciOiJSUzI1NiJ9.{deep[:8000]}", "a" * 8000, "ab%cd.x.y", "..", "a.b.c.d", "eyJ.e yJ.c"]
        for token in shapes:
            status, answer = await sidecar.post(report_body(at="now", document=GOOD), token=token)
            assert (status, answer["reason"]) == (401, "Unauthenticated"), token[:20]
        nested = jwt_shaped({"kubernetes.io": json.loads("[" * 900 + "]" * 900)})
        status, answer = await sidecar.post(report_body(at="now", document=GOOD), token=nested)
        assert (status, answer["reason"]) == (401, "Unauthenticated")
        assert tokens.reviews == 1  # only the token in a token's shape was reviewed
        # A header longer than the HTTP parser takes never reaches the endpoint at all.
        head = f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {'a' * 20_000}\r\n\r\n".encode()
        reader, writer = await _raw_request(operator, tls_files, head)
        assert (await asyncio.wait_for(reader.read(100), timeout=5)).split(b" ")[1] == b"400"
        writer.close()


async def test_a_body_that_does_not_arrive_is_cut_off(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F4: a body is read only once the token is good, and then within body_read_timeout."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files, body_read_timeout=0.5)) as operator:
        token = tokens.issue(NAMESPACE, "p1", "uid-p1")
        head = (f"POST /v1/reports HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n").encode()
        reader, writer = await _raw_request(operator, tls_files, head, b"{")
        answer = await asyncio.wait_for(reader.read(4096), timeout=5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408") and b"SlowBody" in answer
        # An unknown token with the same held body is answered before a byte of the body is read.
        head = head.replace(token.encode(), jwt_shaped({"who": "nobody"}).encode())
        reader, writer = await _raw_request(operator, tls_files, head, b"{")
        answer = await asyncio.wait_for(reader.read(4096), timeout=5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401")


async def test_connections_from_one_address_are_capped(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles) -> None:
    """F4: a caller that opens connections and holds them gets at most connections_per_source; a genuine
    report from elsewhere is judged meanwhile (here the same address once a connection is freed)."""
    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files, connections_per_source=5)) as operator:
        held = []
        for _ in range(5):
            held.append(await _raw_request(operator, tls_files, b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n"))
        server = operator.operator.report_server
        assert server is not None
        await eventually(lambda: server.connections.open_from("127.0.0.1") == 5)
        reader, writer = await _raw_request(operator, tls_files, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await asyncio.wait_for(reader.read(100), timeout=5) == b""  # closed at once
        writer.close()
        assert server.connections.refused >= 1
        for _, held_writer in held[:1]:
            held_writer.close()
        await eventually(lambda: server.connections.open_from("127.0.0.1") <= 4)
        assert (await sidecar_for(operator, tokens, tls_files, "p1").post(report_body(at="now", document=GOOD)))[0] == 202
        for _, held_writer in held[1:]:
            held_writer.close()


# ---------------------------------------------------------------- pure rules (peering, addresses, states)

def _entries(**entries: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from entries.items()


def test_forged_peering_entries_never_become_owners() -> None:
    """F3/F6: only replica-<priority> entries with at most LIFETIME and a lastseen not in the future; an
    overflowing value skips the entry instead of stopping membership."""
    from lockstep.operator.replicas.membership import LIFETIME, live_members

    now = datetime.datetime.now(datetime.UTC)
    seen = now.isoformat()
    status = {
        "replica-1": {"priority": 1, "lifetime": LIFETIME, "lastseen": seen, "endpoint": "10.0.0.7:8443"},
        "replica-2": {"priority": 2, "lifetime": 10**9, "lastseen": (now - datetime.timedelta(minutes=5)).isoformat()},
        "replica-3": {"priority": 4, "lifetime": LIFETIME, "lastseen": seen},  # key and priority disagree
        "someone": {"priority": 5, "lifetime": LIFETIME, "lastseen": seen},
        "replica-6": {"priority": 6, "lifetime": 10**15, "lastseen": "9999-12-31T00:00:00+00:00"},
        "replica-7": {"priority": 7, "lifetime": LIFETIME, "lastseen": "2099-01-01T00:00:00+00:00"},
        "replica-8": {"priority": 8, "lifetime": "1e400", "lastseen": seen},
        "replica-9": {"priority": 9, "lifetime": LIFETIME, "lastseen": seen, "endpoint": "127.0.0.1:8443"},
    }
    members = live_members(status, now)
    assert [(m.priority, str(m.endpoint) if m.endpoint else None) for m in members] == [(1, "10.0.0.7:8443"), (9, None)]


@pytest.mark.parametrize("address", ["127.0.0.1:8443", "[::1]:8443", "0.0.0.0:8443", "169.254.169.254:80",
                                     "[fe80::1%eth0]:8443", "[::ffff:127.0.0.1]:8443", "255.255.255.255:1",
                                     "224.0.0.1:8443", "[ff02::1]:8443", "240.0.0.1:8443"])
def test_report_to_takes_unicast_pod_addresses_only(address: str) -> None:
    """F9: an answer naming anything but a unicast pod address is unusable (the sidecar reports through
    the Service)."""
    from lockstep.core.wire import AnswerError, ReplicaAddress, ReportAnswer

    answer = {"verdict": {"status": "True", "reason": "Verified", "message": ""}, "reportTo": address}
    with pytest.raises(AnswerError):
        ReportAnswer.from_dict(answer)
    assert ReportAnswer.from_dict({**answer, "reportTo": "10.244.0.7:8443"}).report_to == ReplicaAddress("10.244.0.7", 8443)


def test_the_advertise_address_is_checked_at_start() -> None:
    """A name or a loopback --advertise-address would make every reportTo unusable, silently."""
    from click.testing import CliRunner

    from lockstep.cli import cli

    for bad in ("lockstep-0.lockstep.svc", "127.0.0.1", "0.0.0.0"):
        result = CliRunner().invoke(cli, ["operator", "--advertise-address", bad])
        assert result.exit_code == 2 and "--advertise-address" in result.output, result.output


def test_every_reason_counts_as_a_pod_state() -> None:
    from lockstep.operator.judge import PodState, Reason, state_of

    assert state_of(Reason.QUARANTINED) is PodState.QUARANTINED
    assert state_of(Reason.AUDIT) is PodState.AUDIT
    for reason in Reason:
        assert isinstance(state_of(reason), PodState)


async def test_an_interface_too_large_for_the_operator_is_reported_invalid(
        kmock: Emulator, tokens: TokenBook, tls_files: TlsFiles, tmp_path: Any) -> None:
    """F11: a hostile server grows its drifted interface past the operator's body limit. The sidecar's
    reporter (the real one) gets 413 and reports the interface at once as invalid: the pod is not left
    verified for staleAfter."""
    import httpx2

    from lockstep.core.model import Interface
    from lockstep.core.report import Observation
    from lockstep.sidecar.metrics import SidecarMetrics
    from lockstep.sidecar.reporter import Reporter

    await create_objects(kmock, make_resource([GOOD]), make_pod("p1"))
    async with run_operator(kmock, operator_config(tls_files, body_limit=16_384)) as operator, \
            httpx2.AsyncClient(verify=tls_files.client_context()) as client:
        token = tmp_path / "token"
        token.write_text(tokens.issue(NAMESPACE, "p1", "uid-p1"))
        reporter = Reporter(f"https://127.0.0.1:{operator.report_port}/v1/reports", token, client, SidecarMetrics())
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await reporter._deliver(Observation.of_interface(Interface.from_document(GOOD), now))
        assert verdict_of(kmock, "p1") == ("True", "Verified")
        huge = {"tools": [*TOOLS, *({"name": f"t{i}", "description": POISON * 4, "inputSchema": {"type": "object"}}
                                    for i in range(200))]}
        await reporter._deliver(Observation.of_interface(Interface.from_document(huge), now))
        assert reporter.last_delivery is not None and reporter.last_delivery.status == 202
        assert verdict_of(kmock, "p1") == ("False", "InterfaceInvalid")
        pod = pod_of(kmock, "p1")
        message = next(c for c in pod["status"]["conditions"] if c["type"] == "lockstep.dev/interface-verified")
        assert "too large to report" in message["message"]
