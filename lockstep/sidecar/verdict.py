"""What the sidecar's in-line proxy does with each word of the operator about its pod (docs/sidecar.md, "What
the proxy does on each answer"): the proxy fails closed whenever the operator's current verdict is not known
to be True.

- A report's 2xx answer: its ``approved`` part becomes the proxy's gate, and an answer without one (none or
  several resources select the pod) empties the gate (everything withheld). In enforcement Isolate, a True
  verdict lets requests pass until ``staleAfter`` seconds from now (the answer names it), anything else
  isolates the pod.
- A refusal that says the operator holds no verdict for this pod, or writes False for it (403 NotSelected or
  UidMismatch, 404 UnknownPod; a report answered 403 or 404 whatever its body): isolated, and the gate emptied.
- No True answer within ``staleAfter`` (in Quarantine: no 2xx answer): isolated, and the gate emptied (the
  operator marks the pod ReportStale).
- A notice of the verdict watch (lockstep.sidecar.verdict_watch): verdict and gate as a report's answer, but
  it does not renew the staleAfter deadline (only a report the operator judged does).

In Isolate the proxy starts isolated and is released by the first True answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from lockstep.core.gate import ComponentGate
from lockstep.core.ignore import IgnoreRules
from lockstep.core.refusals import Refusal
from lockstep.core.spec import DEFAULT_STALE_AFTER, STALE_INTERVALS
from lockstep.core.wire import AnswerVerdict, ApprovedComponents, ReportAnswer, VerdictNotice
from lockstep.proxy.app import ProxyApp
from lockstep.sidecar.reporter import Delivery

__all__ = ["ISOLATING_REFUSALS", "ISOLATING_STATUSES", "STALE_CHECK_INTERVAL", "VerdictKeeper", "default_stale_after"]

logger = logging.getLogger("lockstep.sidecar")

#: Refusals (lockstep.core.refusals) after which the operator holds no True verdict for this pod; a report
#: answered with one of their statuses isolates whatever its body says (a body is not needed to fail closed).
_ISOLATING = (Refusal.NOT_SELECTED, Refusal.UID_MISMATCH, Refusal.UNKNOWN_POD)
ISOLATING_REFUSALS = frozenset(refusal.reason for refusal in _ISOLATING)
ISOLATING_STATUSES = frozenset(refusal.status for refusal in _ISOLATING)
#: Seconds between two looks at the staleAfter deadline.
STALE_CHECK_INTERVAL = 1.0
#: The reason a proxy is isolated with before any answer, and once its last True is older than staleAfter.
NO_VERDICT, STALE = "NoVerdict", "ReportStale"


def default_stale_after(interval: float) -> float:
    """The spec's staleAfter for a probe interval: what the sidecar assumes until the operator names it."""
    return max(DEFAULT_STALE_AFTER, STALE_INTERVALS * interval)


class VerdictKeeper:
    """Holds the in-line proxy to the operator's current verdict on this pod (see the module's docstring).
    ``clock``: monotonic seconds (tests drive it)."""

    def __init__(self, proxy: ProxyApp, *, isolating: bool, stale_after: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.proxy, self.isolating, self.stale_after, self.clock = proxy, isolating, stale_after, clock
        #: Clock time until which the last True answer stands (None: no True yet).
        self.deadline: float | None = None
        if isolating:
            proxy.isolate(NO_VERDICT)

    def delivered(self, delivery: Delivery) -> None:
        """The outcome of one report."""
        if delivery.answer is not None:
            self.answered(delivery.answer)
        elif delivery.status in ISOLATING_STATUSES:
            self.refused(delivery.refusal if delivery.refusal in ISOLATING_REFUSALS else f"Refused{delivery.status}")

    def refused(self, reason: str) -> None:
        """The operator holds no True verdict for this pod (a refusal in ISOLATING_REFUSALS)."""
        self.deadline = None
        self._withhold_all()
        self._isolate(reason)

    def answered(self, answer: ReportAnswer) -> None:
        """A 2xx answer to a report: the verdict the operator just wrote for it."""
        if answer.stale_after is not None:
            self.stale_after = answer.stale_after
        if answer.verdict.status == "True" or not self.isolating:
            # Quarantine serves what is approved whatever the verdict: any answer shows the operator judging.
            self.deadline = self.clock() + self.stale_after
        self._apply(answer.verdict, answer.approved)

    def noticed(self, notice: VerdictNotice) -> None:
        """A notice of the verdict watch: the operator's verdict now (a True does not renew the deadline)."""
        self._apply(notice.verdict, notice.approved)

    def check(self) -> None:
        """Isolate once the last True is older than staleAfter."""
        if self.deadline is not None and self.clock() >= self.deadline and self.proxy.isolated != STALE:
            self._withhold_all()
            self._isolate(STALE)

    async def watch_deadline(self, interval: float = STALE_CHECK_INTERVAL) -> None:
        """Check the deadline every ``interval`` seconds until cancelled."""
        while True:
            self.check()
            await asyncio.sleep(interval)

    def _apply(self, verdict: AnswerVerdict, approved: ApprovedComponents | None) -> None:
        self.proxy.policy.gate = approved.gate() if approved is not None else _empty_gate()
        if not self.isolating:
            return
        if verdict.status == "True" and self.deadline is not None and self.clock() < self.deadline:
            if self.proxy.isolated is not None:
                logger.warning("In-line proxy: requests pass again, the pod is verified")
            self.proxy.release()
        else:
            self._isolate(verdict.reason if verdict.status != "True" else STALE if self.deadline else NO_VERDICT)

    def _withhold_all(self) -> None:
        self.proxy.policy.gate = _empty_gate()

    def _isolate(self, reason: str) -> None:
        if not self.isolating:
            return
        was = self.proxy.isolated
        self.proxy.isolate(reason)
        if was is None:
            logger.warning("In-line proxy: every request refused, the pod is isolated (%s)", self.proxy.isolated)


def _empty_gate() -> ComponentGate:
    return ComponentGate({}, IgnoreRules())
