"""Units of issue 20: the operator's own pauses are not the pods' silence, and an API outage is noticed
and logged once (the whole story on a real control plane: tests/faults)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from lockstep.operator.freshness import OperatorClock
from lockstep.operator.kube import KubeApiError
from lockstep.operator.outage import ApiOutage, EndlessBackoffs, unavailable


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_of_the_operator_restarts_every_pods_window(caplog: pytest.LogCaptureFixture) -> None:
    clock = OperatorClock()
    clock._time = fake = FakeTime()  # type: ignore[method-assign]
    clock.last, clock.listening_since = fake.now, fake.now - 100  # listening for 100 s
    received = fake.now - 5  # the pod's last report, 5 s before
    fake.now += 0.25
    assert clock.silence(received, clock.now()) == pytest.approx(5.25)
    fake.now += 14  # SIGSTOP for 14 s: nobody looked
    with caplog.at_level(logging.WARNING):
        now = clock.now()
    assert clock.pauses == 1 and "stood still for 14.0 s" in caplog.text
    assert clock.silence(received, now) == 0.0  # a whole staleAfter from the resume
    for _ in range(12):  # the clock's ticks, on time, for 3 s
        fake.now += 0.25
        clock.now()
    assert clock.silence(received, fake.now) == pytest.approx(3.0) and clock.pauses == 1


def test_ticks_that_come_on_time_record_no_pause() -> None:
    clock = OperatorClock()
    clock._time = fake = FakeTime()  # type: ignore[method-assign]
    clock.last, clock.listening_since = fake.now, fake.now - 100
    for _ in range(100):
        fake.now += 0.3
        clock.now()
    assert clock.pauses == 0 and clock.silence(1000.0, fake.now) == pytest.approx(30.0)


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    outage = ApiOutage()
    with caplog.at_level(logging.WARNING):
        for _ in range(20):
            outage.failed(ConnectionRefusedError("refused"))
            outage.answered_503 += 1
        outage.ok()
        outage.ok()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("Kubernetes API unreachable since") and "answering reports 503" in lines[0]
    assert lines[1].startswith("Kubernetes API back after") and "20 reports answered 503" in lines[1]
    assert not outage.active and outage.outages == 1


@pytest.mark.parametrize(("error", "away"), [
    (ConnectionRefusedError(), True), (TimeoutError(), True), (KubeApiError(503, "x"), True),
    (KubeApiError(500, "etcdserver: request timed out"), True), (KubeApiError(429, "x"), True),
    (KubeApiError(409, "x"), False), (KubeApiError(404, "x"), False), (KubeApiError(422, "x"), False)])
def test_what_counts_as_the_api_being_away(error: BaseException, away: bool) -> None:
    assert unavailable(error) is away


def test_kopf_retries_never_run_out_and_start_again_each_time() -> None:
    backoffs = EndlessBackoffs()
    first = [next(iter(backoffs)) for _ in range(3)]
    assert first == [1, 1, 1]  # every request starts from the beginning
    endless = iter(backoffs)
    taken = [next(endless) for _ in range(50)]
    assert taken[:7] == [1, 1, 2, 3, 5, 8, 13] and set(taken[7:]) == {15.0}
    assert not hasattr(backoffs, "__len__")  # kopf counts no last attempt


@pytest.mark.parametrize(("method", "path", "kind"), [
    ("PATCH", "/api/v1/namespaces/a/pods/p1/status", ("PATCH", "api", "v1", "pods", "status")),
    ("GET", "/api/v1/namespaces/a/pods?limit=1", ("GET", "api", "v1", "pods", "collection")),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
     ("POST", "apis", "authentication.k8s.io", "v1", "tokenreviews", "collection")),
    ("PATCH", "/apis/lockstep.dev/v1alpha1/namespaces/b/mcpserverinterfaces/w/status",
     ("PATCH", "apis", "lockstep.dev", "v1alpha1", "mcpserverinterfaces", "status")),
])
def test_requests_are_kinds_without_namespace_or_name(method: str, path: str, kind: tuple[str, ...]) -> None:
    from lockstep.operator.outage import request_kind

    assert request_kind(method, path) == kind
    assert request_kind(method, path.replace("/a/", "/other/").replace("/p1/", "/p2/")) == kind


async def test_a_403_for_what_was_allowed_before_is_transient(caplog: pytest.LogCaptureFixture) -> None:
    """A restarted kube-apiserver refuses until its RBAC authorizer has synced, even when the operator
    never saw it away: that is a 503 for the sidecar and one log line, not a traceback per report."""
    from lockstep.operator.kube import KubeClient
    from lockstep.operator.outage import ApiUnavailable, TrackedKubeClient

    answers: list[Any] = [{}, KubeApiError(403, "forbidden"), KubeApiError(403, "forbidden"), {}]

    async def scripted(self: Any, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    client = TrackedKubeClient.__new__(TrackedKubeClient)
    client.outage, client._allowed, client._refused = ApiOutage(), set(), set()
    path = "/api/v1/namespaces/a/pods/p1/status"
    with pytest.MonkeyPatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(KubeClient, "request", scripted)
        await client.request("PATCH", path)
        for _ in range(2):
            with pytest.raises(ApiUnavailable):
                await client.request("PATCH", path.replace("p1", "p2"))
        await client.request("PATCH", path)
        answers.append(KubeApiError(403, "forbidden"))
        with pytest.raises(KubeApiError) as never_allowed:
            await client.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews")
    assert not isinstance(never_allowed.value, ApiUnavailable)
    assert caplog.text.count("which it allowed before") == 1 and "allows PATCH" in caplog.text
