"""Units of issue 20: the operator's own pauses are not the pods' silence, and an API outage is noticed
and logged once (the whole story on a real control plane: tests/faults)."""

from __future__ import annotations

import logging

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
