"""The report endpoint's refusals, one table (issue 27 item 3): for each, the HTTP status and reason the
operator answers, whether the connection closes with the answer, the Retry-After it names, and what the
sidecar does with it. The operator's endpoint, the sidecar's reporter, the rejection metric's labels and
docs/operator.md (tests/docs) all read this table; none keeps a list of its own."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["GATEWAY_STATUSES", "Refusal", "SidecarAction", "retried_statuses"]


class SidecarAction(str, enum.Enum):
    """What the sidecar does with a refusal."""

    #: Not delivered: counted as a failed delivery, sent again after Retry-After (or its backoff).
    RETRY = "retry"
    #: Refused now, possibly not for long (a cache of the operator's catches up with a new pod, a resource, a
    #: token): counted as rejected, sent again after its backoff.
    RETRY_REJECTED = "retry-rejected"
    #: The same report would be refused again: counted as rejected, not sent again.
    GIVE_UP = "give-up"
    #: The report is over the operator's body limit: the interface is reported at once as invalid.
    REPORT_INVALID = "report-invalid"


@dataclass(frozen=True)
class _Rule:
    status: int
    reason: str
    sidecar: SidecarAction
    #: The answer closes the connection (a body the operator never read, or a retry that should reach another
    #: replica through the Service).
    closes: bool = False
    #: The Retry-After the answer names when the refusal itself sets none (seconds; None: no header).
    retry_after: float | None = None
    #: Counted in ``lockstep_reports_rejected_total{reason}``.
    counted: bool = True


class Refusal(enum.Enum):
    """Every refusal of ``POST /v1/reports``."""

    UNAUTHENTICATED = _Rule(401, "Unauthenticated", SidecarAction.RETRY_REJECTED, closes=True)
    UNKNOWN_POD = _Rule(404, "UnknownPod", SidecarAction.RETRY_REJECTED)
    UID_MISMATCH = _Rule(403, "UidMismatch", SidecarAction.RETRY_REJECTED)
    NOT_SELECTED = _Rule(403, "NotSelected", SidecarAction.RETRY_REJECTED)
    BAD_REPORT = _Rule(400, "BadReport", SidecarAction.GIVE_UP)
    CLOCK_SKEW = _Rule(400, "ClockSkew", SidecarAction.GIVE_UP)
    REPLAYED = _Rule(409, "Replayed", SidecarAction.GIVE_UP)
    TOO_LARGE = _Rule(413, "TooLarge", SidecarAction.REPORT_INVALID, closes=True)
    SLOW_BODY = _Rule(408, "SlowBody", SidecarAction.RETRY, closes=True)
    RATE_LIMITED = _Rule(429, "RateLimited", SidecarAction.RETRY)
    OVERLOADED = _Rule(503, "Overloaded", SidecarAction.RETRY, retry_after=1.0)
    NOT_WRITTEN = _Rule(503, "NotWritten", SidecarAction.RETRY, retry_after=1.0)
    API_UNAVAILABLE = _Rule(503, "ApiUnavailable", SidecarAction.RETRY)
    NOT_SERVING = _Rule(503, "NotServing", SidecarAction.RETRY, closes=True, retry_after=1.0, counted=False)

    @property
    def status(self) -> int:
        return self.value.status

    @property
    def reason(self) -> str:
        return self.value.reason

    @property
    def sidecar(self) -> SidecarAction:
        return self.value.sidecar

    @property
    def closes(self) -> bool:
        return self.value.closes

    @property
    def retry_after(self) -> float | None:
        return self.value.retry_after

    @property
    def counted(self) -> bool:
        return self.value.counted

    @classmethod
    def counted_reasons(cls) -> tuple[str, ...]:
        """The ``reason`` label values of ``lockstep_reports_rejected_total``."""
        return tuple(refusal.reason for refusal in cls if refusal.counted)


#: Answers of something between the sidecar and the operator (a proxy, a load balancer): retried.
GATEWAY_STATUSES = frozenset({500, 502, 504})


def retried_statuses(action: SidecarAction) -> frozenset[int]:
    """The HTTP statuses the sidecar treats with ``action`` (each status has one action: tests/unit)."""
    statuses = {refusal.status for refusal in Refusal if refusal.sidecar is action}
    return frozenset(statuses | GATEWAY_STATUSES) if action is SidecarAction.RETRY else frozenset(statuses)
