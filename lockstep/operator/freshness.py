"""Replay protection for reports: per pod, only a report newer than the last accepted one is taken.

The rule is lockstep.core.replay's. The last stamp accepted for a pod is looked up in this replica's
memory and in the pod's annotation ``lockstep.dev/last-report``, which the operator writes with every
verdict: after a restart, or when another replica wrote the verdict, the pod still tells. A report is
refused (409 Replayed) when it is not newer than either. Its ``sentAt`` must be within ``max_skew`` of
the operator's clock (400 ClockSkew), which bounds how old a captured report can be at all.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import OrderedDict

from lockstep.core.refusals import Refusal
from lockstep.core.replay import ReportStamp, StampError, parse_moment
from lockstep.core.report import Freshness

__all__ = ["DEFAULT_MAX_SKEW", "FreshnessBook", "OperatorClock", "StaleReport"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_SKEW = 120.0
MAX_PODS = 200_000


class StaleReport(Exception):
    """A report that is not fresh: Replayed or ClockSkew (``refusal``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.refusal = Refusal.REPLAYED if reason == "Replayed" else Refusal.CLOCK_SKEW


def stamp_of(freshness: Freshness) -> ReportStamp:
    try:
        return ReportStamp.of(freshness)
    except StampError as error:
        raise StaleReport("ClockSkew", str(error)) from None


class FreshnessBook:
    def __init__(self, max_skew: float = DEFAULT_MAX_SKEW) -> None:
        self.max_skew = max_skew
        self._seen: OrderedDict[str, ReportStamp] = OrderedDict()

    def admit(self, pod_uid: str, freshness: Freshness, now: datetime.datetime | None = None, *,
              recorded: ReportStamp | None = None) -> ReportStamp:
        """Accept and remember ``freshness`` for the pod, or raise StaleReport (nothing remembered).
        ``recorded``: the stamp the pod's annotation carries (the last verdict's report, whoever wrote it)."""
        now = now or datetime.datetime.now(datetime.UTC)
        try:
            sent_at = parse_moment(freshness.sent_at, "sentAt")
        except StampError as error:
            raise StaleReport("ClockSkew", str(error)) from None
        if abs((now - sent_at).total_seconds()) > self.max_skew:
            raise StaleReport("ClockSkew", f"sentAt {freshness.sent_at} is more than {self.max_skew:g}s from the "
                                           "operator's clock (a replayed report, or clocks out of sync)")
        stamp = stamp_of(freshness)
        if (stamp.boot_time - now).total_seconds() > self.max_skew:
            raise StaleReport("ClockSkew", f"bootTime {freshness.boot_time} is in the future: a sidecar cannot "
                                           "have started after the report was sent")
        if recorded is not None and not recorded.plausible(now, self.max_skew):
            recorded = None  # a stamp from the future was not written by Lockstep: it cannot lock a pod out
        for last in (self._seen.get(pod_uid), recorded):
            why = stamp.replays(last) if last is not None else None
            if why is not None:
                raise StaleReport("Replayed", why)
        self._seen[pod_uid] = stamp
        self._seen.move_to_end(pod_uid)
        if len(self._seen) > MAX_PODS:
            self._seen.popitem(last=False)
        return stamp

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
