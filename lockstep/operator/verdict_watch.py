"""The verdict watch (``GET /v1/verdicts?since=<etag>``): a proxy sidecar's long poll, answered as soon as its
pod's verdict or approved components differ from what it last got, so that a change made while the pod serves
(a revision removed from ``spec.approved``, the pod relabelled out of its interface, the interface deleted)
reaches the pod's in-line proxy at once instead of at its next report.

Authenticated exactly as reports are (lockstep.operator.reports): the bearer token's form, the per-source
bucket for tokens no cache knows, the same TokenReviewer and its cache (a watch every 30 s costs no
TokenReview while the token's review is cached), the pod from the token, its uid, its selection. Bounded: at
most MAX_WATCHES_PER_POD open watches per pod and a token bucket of watch requests per pod (a sidecar that
sends ``since`` values that never match cannot spin the operator); each waits at most WATCH_WAIT seconds.
Fails closed: a pod no longer selected is refused 403 NotSelected, which isolates its proxy, as does a pod
the operator does not know (404 UnknownPod).

The reconciler pulses a pod's key (:class:`VerdictPulses`) whenever it has judged the pod; every watch of that
pod then compares its answer with the one its sidecar holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from lockstep.core.refusals import Refusal
from lockstep.core.wire import AnswerVerdict, ApprovedComponents, VerdictNotice
from lockstep.operator.cache import PodRecord
from lockstep.operator.callers import Callers, Identity, ReportRejected, not_serving
from lockstep.operator.outage import ApiOutage, ApiUnavailable
from lockstep.operator.replicas.ownership import UNKNOWN, Remote
from lockstep.operator.report_limits import RateLimiter
from lockstep.operator.state import Key
from lockstep.operator.verdict_pulses import VerdictPulses

if TYPE_CHECKING:
    from lockstep.operator.reconciler import Reconciler

__all__ = ["MAX_WATCHES_PER_POD", "WATCH_WAIT", "VerdictPulses", "VerdictWatch"]

#: Seconds a watch waits for a change before it is answered with the same notice.
WATCH_WAIT = 30.0
#: Open watches per pod (a sidecar holds one; a second covers a retry racing the first).
MAX_WATCHES_PER_POD = 2
#: Watch requests per pod: the bucket's rate (per second) and burst.
WATCH_RATE, WATCH_BURST = 1.0, 10
#: Etags of approved sets kept (by the object, which lockstep.operator.quarantine keeps per judging key).
_ETAGS_KEPT = 1024


class VerdictWatch:
    """The route's handler; the report server it belongs to authenticates and holds the reconciler."""

    def __init__(self, reconciler: Reconciler, callers: Callers, rejected: Callable[[ReportRejected], web.Response],
                 serving: Callable[[], bool], outage: ApiOutage, *, wait: float = WATCH_WAIT) -> None:
        self.reconciler = reconciler
        self.callers = callers
        self._rejected = rejected
        self._serving = serving
        self._outage = outage
        self.wait = wait
        self._open: dict[Key, int] = {}
        self._requests = RateLimiter(WATCH_RATE, WATCH_BURST)
        self._etags: dict[int, tuple[ApprovedComponents, str]] = {}
        self.closed = False

    def close(self) -> None:
        """The operator stops: every watch is answered now (503, to go to another replica), not at its wait's end."""
        self.closed = True
        self.pulses.wake_all()

    @property
    def pulses(self) -> VerdictPulses:
        return self.reconciler.pulses

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not self._serving() or self.closed:
            return not_serving()
        try:
            identity = await self.callers.identify(request, self._requests, "verdict watches")
            pod = self.callers.pod(identity)
            route = self.reconciler.ownership.route(pod)
            if isinstance(route, Remote):  # the owner holds the pod's verdict: the sidecar watches there
                return web.json_response({"reason": "NotOwner", "reportTo": str(route.address)}, status=421)
            if route is UNKNOWN:
                return not_serving()
            with self._slot(pod.key):
                notice = await self._wait(identity, request.query.get("since"))
            if self.closed:
                return not_serving()
        except ReportRejected as rejection:
            return self._rejected(rejection)
        except ApiUnavailable:
            return self._rejected(ReportRejected(Refusal.API_UNAVAILABLE, "the Kubernetes API is unreachable",
                                                 retry_after=self._outage.retry_after()))
        if notice is None:
            return web.Response(status=204)
        return web.json_response(notice.to_dict())

    @contextlib.contextmanager
    def _slot(self, key: Key) -> Iterator[None]:
        if self._open.get(key, 0) >= MAX_WATCHES_PER_POD:
            raise ReportRejected(Refusal.RATE_LIMITED, "too many open verdict watches for this pod",
                                 retry_after=self.wait)
        self._open[key] = self._open.get(key, 0) + 1
        try:
            yield
        finally:
            left = self._open.pop(key) - 1
            if left:
                self._open[key] = left
            else:
                self.pulses.discard(key)

    async def _wait(self, identity: Identity, since: str | None) -> VerdictNotice | None:
        """The pod's notice once it differs from ``since``, or after the wait; the pod is checked again at
        every change (one no longer selected is refused)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        while True:
            pod = self.callers.pod(identity)
            if not self.reconciler.ownership.owns_pod(pod):
                return None  # handed over meanwhile: asked again, this replica names the owner (421)
            pulse = self.pulses.event(pod.key)
            notice = self._notice(pod)
            remaining = deadline - loop.time()
            if (notice is not None and notice.etag != since) or remaining <= 0 or self.closed:
                return notice
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await pulse.wait()

    def _notice(self, pod: PodRecord) -> VerdictNotice | None:
        """What the pod's last report would be answered with now (None: no verdict for it here yet)."""
        reconciler = self.reconciler
        track = reconciler.state.tracks.get(pod.key)
        if track is None or track.uid != pod.uid or track.verdict is None:
            return None
        verdict = AnswerVerdict(track.verdict.status, track.verdict.reason.value, track.verdict.message)
        approved = reconciler.approved_for(pod)
        text = json.dumps([verdict.to_dict(), self._approved_etag(approved)], sort_keys=True)
        return VerdictNotice(verdict, approved, hashlib.sha256(text.encode()).hexdigest()[:32])

    def _approved_etag(self, approved: ApprovedComponents | None) -> str | None:
        if approved is None:
            return None
        cached = self._etags.get(id(approved))
        if cached is None or cached[0] is not approved:
            if len(self._etags) >= _ETAGS_KEPT:
                self._etags.clear()
            text = json.dumps(approved.to_dict(), sort_keys=True)
            cached = self._etags[id(approved)] = (approved, hashlib.sha256(text.encode()).hexdigest())
        return cached[1]
