"""Replay protection for reports: per pod, only a report newer than the last accepted one is taken.

Each sidecar process stamps every send with its random boot id, its start time and a growing sequence
number (lockstep.core.report.Freshness). A report is refused (409 Replayed) when it is not newer than the
last report accepted for the same pod uid: same boot and a sequence not above the last, or another boot
that did not start later. Its ``sentAt`` must be within ``max_skew`` of the operator's clock (400
ClockSkew), which bounds how old a captured report can be after the operator restarts and forgets.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from lockstep.core.report import Freshness

__all__ = ["DEFAULT_MAX_SKEW", "FreshnessBook", "OperatorClock", "StaleReport"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_SKEW = 120.0
MAX_PODS = 200_000


class StaleReport(Exception):
    """A report that is not fresh: ``reason`` is Replayed or ClockSkew."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class _Seen:
    boot_id: str
    boot_time: datetime.datetime
    sequence: int


def _parse_time(text: str, field: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise StaleReport("ClockSkew", f"{field} is not a timestamp: {text[:40]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


class FreshnessBook:
    def __init__(self, max_skew: float = DEFAULT_MAX_SKEW) -> None:
        self.max_skew = max_skew
        self._seen: OrderedDict[str, _Seen] = OrderedDict()

    def admit(self, pod_uid: str, freshness: Freshness, now: datetime.datetime | None = None) -> None:
        """Accept and remember ``freshness`` for the pod, or raise StaleReport (nothing remembered)."""
        now = now or datetime.datetime.now(datetime.UTC)
        sent_at = _parse_time(freshness.sent_at, "sentAt")
        if abs((now - sent_at).total_seconds()) > self.max_skew:
            raise StaleReport("ClockSkew", f"sentAt {freshness.sent_at} is more than {self.max_skew:g}s from the "
                                           "operator's clock (a replayed report, or clocks out of sync)")
        seen = _Seen(freshness.boot_id, _parse_time(freshness.boot_time, "bootTime"), freshness.sequence)
        last = self._seen.get(pod_uid)
        if last is not None:
            if seen.boot_id == last.boot_id and seen.sequence <= last.sequence:
                raise StaleReport("Replayed", f"sequence {seen.sequence} of this sidecar was accepted already "
                                              f"(last {last.sequence}): a replayed report")
            if seen.boot_id != last.boot_id and seen.boot_time <= last.boot_time:
                raise StaleReport("Replayed", "a report from a sidecar process that started before the last "
                                              "one accepted for this pod: a replayed report")
        self._seen[pod_uid] = seen
        self._seen.move_to_end(pod_uid)
        if len(self._seen) > MAX_PODS:
            self._seen.popitem(last=False)

    def forget(self, pod_uid: str) -> None:
        self._seen.pop(pod_uid, None)


#: How often the clock's own task looks at the time, and the gap it takes for a pause of the operator.
TICK = 0.25
PAUSE_THRESHOLD = 1.0


class OperatorClock:
    """The operator's own progress, so that silence is blamed on the pod only when the operator was
    listening (a SIGSTOP, a GC pause or a CPU-starved node look the same to a pod: its reports wait).

    A task ticks every ``TICK`` seconds; any look at the clock (a tick, or the stale check itself,
    whichever runs first after the operator resumes) that finds more than ``PAUSE_THRESHOLD`` seconds
    since the last look records a pause. ``listening_since`` is the end of the last pause: a pod's
    silence is counted from its last report or from then, whichever is later, so every pod gets a
    whole ``staleAfter`` after the operator resumes to get its queued or retried report through.
    """

    def __init__(self, threshold: float = PAUSE_THRESHOLD) -> None:
        self._time = time.monotonic
        self.threshold = threshold
        self.last = self._time()
        self.listening_since = self.last
        self.pauses = 0
        self.paused_seconds = 0.0

    def now(self) -> float:
        """Monotonic now; records a pause when the operator did not look for longer than the threshold."""
        now = self._time()
        gap = now - self.last
        self.last = now
        if gap > self.threshold:
            self.pauses += 1
            self.paused_seconds += gap
            self.listening_since = now
            logger.warning(
                "The operator stood still for %.1f s (paused, starved of CPU or frozen): every pod's silence "
                "is counted from now, not from its last report", gap)
        return now

    def silence(self, received_at: float, now: float) -> float:
        """How long a pod whose last report came at ``received_at`` has been silent while listened to."""
        return now - max(received_at, self.listening_since)

    async def run(self) -> None:
        while True:
            self.now()
            await asyncio.sleep(TICK)
