"""Replay protection's rule, and its record in the API.

Every send of a sidecar process carries its random boot id, its start time and a sequence that grows
with every send (lockstep.core.report.Freshness). A report is newer than another of the same pod when
it comes from the same process with a higher sequence, or from a process that started later.

The operator keeps the stamp of the report behind a pod's verdict in the pod's annotation
``lockstep.dev/last-report`` (REPORT_STAMP_ANNOTATION), written in the same pods/status request as the
verdict. Every replica and a restarted operator read it from the pod, so a captured report cannot
undo a verdict however often the operator restarts or which replica it reaches.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from lockstep.core.errors import LockstepError
from lockstep.core.names import REPORT_STAMP_ANNOTATION
from lockstep.core.report import Freshness

__all__ = ["REPORT_STAMP_ANNOTATION", "ReportStamp", "StampError", "parse_moment", "recorded_stamp"]



class StampError(LockstepError):
    """A stamp that cannot be read: a timestamp that is not one, or an annotation that is not ours."""


def parse_moment(text: Any, field: str) -> datetime.datetime:
    """An ISO 8601 timestamp of a report (UTC when it names no zone); StampError when it is not one."""
    if not isinstance(text, str):
        raise StampError(f"{field} is not a timestamp")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise StampError(f"{field} is not a timestamp: {text[:40]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class ReportStamp:
    """Which sidecar process sent a report, and its place in that process's sends."""

    boot_id: str
    boot_time: datetime.datetime
    sequence: int

    @classmethod
    def of(cls, freshness: Freshness) -> ReportStamp:
        return cls(freshness.boot_id, parse_moment(freshness.boot_time, "bootTime"), freshness.sequence)

    def replays(self, last: ReportStamp) -> str | None:
        """Why this stamp is not newer than ``last`` (a replayed report), or None when it is newer."""
        if self.boot_id == last.boot_id:
            if self.sequence <= last.sequence:
                return (f"sequence {self.sequence} of this sidecar was accepted already (last {last.sequence}): "
                        "a replayed report")
            return None
        if self.boot_time <= last.boot_time:
            return "a report from a sidecar process that started before the last one accepted for this pod: " \
                   "a replayed report"
        return None

    def plausible(self, now: datetime.datetime, skew: float) -> bool:
        """Whether Lockstep can have accepted this stamp by ``now``: a process that started more than
        ``skew`` seconds in the future never sent a report (the operator refuses such reports)."""
        return (self.boot_time - now).total_seconds() <= skew

    def to_annotation(self) -> str:
        return json.dumps({"bootId": self.boot_id, "bootTime": self.boot_time.isoformat(),
                           "sequence": self.sequence}, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str) -> ReportStamp:
        try:
            body = json.loads(text)
        except ValueError:
            raise StampError("the annotation is not JSON") from None
        if not isinstance(body, dict):
            raise StampError("the annotation is not a JSON object")
        boot_id, sequence = body.get("bootId"), body.get("sequence")
        if not isinstance(boot_id, str) or not boot_id:
            raise StampError("the annotation has no bootId")
        if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 0:
            raise StampError("the annotation has no sequence")
        return cls(boot_id, parse_moment(body.get("bootTime"), "bootTime"), sequence)


def recorded_stamp(annotations: Mapping[str, str]) -> ReportStamp | None:
    """The stamp of the report behind a pod's verdict, as its annotation tells. One that cannot be read
    (someone else wrote it) is set aside: the replica's memory still applies, and the next verdict
    written replaces it."""
    text = annotations.get(REPORT_STAMP_ANNOTATION)
    if not text:
        return None
    try:
        return ReportStamp.from_annotation(text)
    except (StampError, ValueError, OverflowError, RecursionError):
        return None
