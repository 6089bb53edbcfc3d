"""The verdict watch: a proxy sidecar's long poll to the operator (``GET /v1/verdicts?since=<etag>``), so that a
verdict or an approval that changes while the pod serves (a revision removed from ``spec.approved``, the pod
relabelled out of its interface) reaches the proxy at once, not at the next report (one probe interval).

It goes over the report channel: the same HTTPS client and CA, the same projected token, which the operator
reviews as it reviews reports (its cached TokenReview; the pod comes from the token). The operator answers
when the pod's answer differs from ``since``, or after a wait (the same answer again); a replica that does not
own the pod answers 421 naming the one that does, which the next watch goes to directly (verifying the
Service's certificate name there, as reports do). An operator without the route (404 without a reason) is
asked again after a long pause: reports alone then carry verdicts, as before.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx2

from lockstep.core.wire import VERDICTS_PATH, AddressError, AnswerError, ReplicaAddress, VerdictNotice
from lockstep.sidecar.reporter import TokenUnavailableError, refusal_reason
from lockstep.sidecar.verdict import ISOLATING_REFUSALS, VerdictKeeper

__all__ = ["WATCH_READ_TIMEOUT", "VerdictWatcher"]

logger = logging.getLogger("lockstep.sidecar")

#: The operator answers a watch within its wait (30 s); a watch without an answer this long is given up.
WATCH_READ_TIMEOUT = 60.0
#: An operator without the watch (an older one): asked again after this long.
UNSUPPORTED_PAUSE = 300.0
MIN_BACKOFF, MAX_BACKOFF = 0.5, 30.0


class VerdictWatcher:
    def __init__(self, operator_url: str, token: Callable[[], str], client: httpx2.AsyncClient,
                 keeper: VerdictKeeper, *, max_backoff: float = MAX_BACKOFF) -> None:
        self._url = f"{operator_url}{VERDICTS_PATH}"
        parts = urlsplit(operator_url)
        self._scheme, self._server_name = parts.scheme, parts.hostname
        self._token, self._client, self._keeper = token, client, keeper
        self._max_backoff = max_backoff
        #: The etag of the last notice: the next watch is answered once the operator's answer differs.
        self.etag: str | None = None
        #: The replica that owns this pod, once one said so (None: through the Service).
        self.direct: ReplicaAddress | None = None
        self.notices = 0

    async def run(self) -> None:
        """Watch until cancelled; never raises."""
        backoff = MIN_BACKOFF
        while True:
            try:
                pause = await self._once()
            except (httpx2.HTTPError, OSError, TokenUnavailableError) as error:
                logger.debug("Verdict watch failed: %s", error)
                self.direct, pause = None, None
            except Exception:  # never let the watch die: reports still carry verdicts meanwhile
                logger.exception("Unexpected error in the verdict watch")
                pause = None
            if pause is None:
                pause, backoff = backoff * random.uniform(0.5, 1.0), min(backoff * 2, self._max_backoff)
            elif pause == 0:
                backoff = MIN_BACKOFF
            if pause:
                await asyncio.sleep(pause)

    async def _once(self) -> float | None:
        """One watch; the seconds to pause before the next (0: none; None: the backoff)."""
        response = await self._get()
        if response.status_code == 200:
            try:
                notice = VerdictNotice.from_dict(response.json())
            except (ValueError, AnswerError) as error:
                logger.error("The operator's verdict notice is unusable, ignoring it: %s", error)
                return None
            self.etag, self.notices = notice.etag, self.notices + 1
            self._keeper.noticed(notice)
            return 0
        if response.status_code == 204:  # no verdict yet: the operator waited
            return 0
        reason = refusal_reason(response)
        if response.status_code == 421:
            return self._redirected(response)
        if reason in ISOLATING_REFUSALS:
            self._keeper.refused(reason or "")
            return None
        if response.status_code == 404 and reason is None:
            return UNSUPPORTED_PAUSE
        return _retry_after(response)

    async def _get(self) -> httpx2.Response:
        headers = {"Authorization": f"Bearer {self._token()}"}
        params = {"since": self.etag} if self.etag else None
        timeout = httpx2.Timeout(WATCH_READ_TIMEOUT, connect=10.0)
        if self.direct is None:
            return await self._client.get(self._url, headers=headers, params=params, timeout=timeout)
        extensions = {"sni_hostname": self._server_name} if self._scheme == "https" and self._server_name else None
        return await self._client.get(f"{self._scheme}://{self.direct}{VERDICTS_PATH}", headers=headers,
                                      params=params, timeout=timeout, extensions=extensions)

    def _redirected(self, response: httpx2.Response) -> float | None:
        try:
            self.direct = ReplicaAddress.parse(response.json().get("reportTo"))
        except (ValueError, AttributeError, AddressError):
            self.direct = None
            return None
        return 0


def _retry_after(response: httpx2.Response) -> float | None:
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(max(seconds, 0.1), 300.0)
