"""Replay protection for reports: per pod, only a report newer than the last accepted one is taken.

Each sidecar process stamps every send with its random boot id, its start time and a growing sequence
number (lockstep.core.report.Freshness). A report is refused (409 Replayed) when it is not newer than the
last report accepted for the same pod uid: same boot and a sequence not above the last, or another boot
that did not start later. Its ``sentAt`` must be within ``max_skew`` of the operator's clock (400
ClockSkew), which bounds how old a captured report can be after the operator restarts and forgets.
"""

from __future__ import annotations

import datetime
from collections import OrderedDict
from dataclasses import dataclass

from lockstep.core.report import Freshness

__all__ = ["DEFAULT_MAX_SKEW", "FreshnessBook", "StaleReport"]

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
