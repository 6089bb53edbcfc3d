"""Kubernetes API outages: noticed once, logged once, answered 503, and left behind on their own.

Every request the operator makes itself goes through :class:`TrackedKubeClient`. A request that cannot
reach the API server (refused, reset, timed out) or that it answers 5xx or 429 raises
:class:`ApiUnavailable` (an ``OSError``, so every existing ``except (KubeApiError, OSError)`` handles it)
and opens an outage; the next request that succeeds closes it. An outage is logged as two lines, one
when it starts and one when it ends, never once per report::

    Kubernetes API unreachable since 12:00:03 (...), answering reports 503
    Kubernetes API back after 14 s (9 reports answered 503)

While it lasts a report whose verdict needs a write is answered ``503`` with ``Retry-After``; a report
whose verdict is already what the pod carries is answered 202 as always (nothing to write). A probe
(one cheap quorum read a second) notices the end even when no report needs the API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import kopf
from lockstep.operator.config import OperatorConfig
from lockstep.operator.kube import KubeApiError, KubeClient

__all__ = ["OUTAGE_RETRY_AFTER", "ApiOutage", "ApiUnavailable", "EndlessBackoffs", "TrackedKubeClient", "request_kind"]

logger = logging.getLogger("lockstep.operator.outage")

#: Seconds a sidecar is asked to wait (Retry-After) while the API server is away.
OUTAGE_RETRY_AFTER = 5.0
#: For this long after an outage, a 403 is the API server warming up (a restarted kube-apiserver refuses
#: requests until its RBAC authorizer has synced): the write is retried, quietly, as during the outage.
WARM_UP = 30.0


class ApiUnavailable(OSError):
    """The Kubernetes API could not be reached, or answered 5xx or 429: try again later."""


class ApiOutage:
    """The state of the API server as the operator's own requests see it."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic start of the current outage
        self.warm_until = 0.0  # monotonic end of the warm-up after the last outage
        self._wall: str = ""
        self.answered_503 = 0
        self.outages = 0
        #: Set while an outage lasts.
        self.began = asyncio.Event()

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, error: BaseException) -> None:
        if self.since is not None:
            return
        self.since = time.monotonic()
        self._wall = datetime.now(UTC).strftime("%H:%M:%S")
        self.answered_503 = 0
        self.outages += 1
        self.began.set()
        logger.warning("Kubernetes API unreachable since %s UTC (%s), answering reports 503",
                       self._wall, _one_line(error))

    def ok(self) -> None:
        if self.since is None:
            return
        seconds = time.monotonic() - self.since
        self.warm_until = time.monotonic() + WARM_UP
        self.since = None
        self.began.clear()
        logger.warning("Kubernetes API back after %.0f s (unreachable since %s UTC; %d reports answered 503)",
                       seconds, self._wall, self.answered_503)

    def retry_after(self) -> float:
        return OUTAGE_RETRY_AFTER


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` means the API server is away (not that it refused this request)."""
    if isinstance(error, KubeApiError):
        return error.status >= 500 or error.status == 429
    return isinstance(error, (aiohttp.ClientError, OSError, asyncio.TimeoutError))


def request_kind(method: str, path: str) -> tuple[str, ...]:
    """What a request does, without namespace or object name: ``PATCH /api/v1/namespaces/a/pods/p/status``
    and the same PATCH of another pod are one kind, which RBAC allows or refuses as one."""
    parts = [part for part in path.split("?")[0].split("/") if part]
    prefix = parts[:2] if parts[:1] == ["api"] else parts[:3]
    rest = parts[len(prefix):]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    shape = rest[0] if rest else ""
    suffix = rest[2] if len(rest) > 2 else ("item" if len(rest) == 2 else "collection")
    return (method, *prefix, shape, suffix)


class TrackedKubeClient(KubeClient):
    """A KubeClient whose every request tells :class:`ApiOutage` how it went.

    A 403 for a kind of request that the API server allowed before is taken as transient, like an
    outage: a restarted kube-apiserver refuses requests until its RBAC authorizer has synced, and it
    may restart without the operator seeing it away. It is logged once until allowed again, and reports
    are answered 503 meanwhile (fail closed: nothing is written that could not be). A 403 for a kind
    never allowed is the chart's RBAC, and raised as it is.
    """

    def __init__(self, info: kopf.ConnectionInfo, outage: ApiOutage) -> None:
        super().__init__(info)
        self.outage = outage
        self._allowed: set[tuple[str, ...]] = set()
        self._refused: set[tuple[str, ...]] = set()

    async def request(self, method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json", params: Mapping[str, str] | None = None) -> Any:
        kind = request_kind(method, path)
        try:
            result = await super().request(method, path, body, content_type=content_type, params=params)
        except ApiUnavailable:
            raise
        except KubeApiError as error:
            if unavailable(error):
                self.outage.failed(error)
                raise ApiUnavailable(str(error)) from error
            if error.status == 403 and time.monotonic() < self.outage.warm_until:
                raise ApiUnavailable(f"{error} (just after an outage: retried)") from error
            if error.status == 403 and kind in self._allowed:
                self._refused_once(kind, error)
                raise ApiUnavailable(f"{error} (allowed before: retried)") from error
            self.outage.ok()  # it answered: it is there
            raise
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
            self.outage.failed(error)
            raise ApiUnavailable(f"{method} {path}: {_one_line(error)}") from error
        self.outage.ok()
        self._allowed.add(kind)
        if kind in self._refused:
            self._refused.discard(kind)
            logger.warning("Kubernetes API allows %s again", " ".join(kind))
        return result

    def _refused_once(self, kind: tuple[str, ...], error: KubeApiError) -> None:
        if kind not in self._refused:
            self._refused.add(kind)
            logger.warning("Kubernetes API refused %s, which it allowed before (%s): the API server restarting "
                           "or RBAC changing; answering reports 503 until it is allowed again",
                           " ".join(kind), _one_line(error))

    async def probe(self, path: str) -> None:
        """One cheap read that goes to etcd (no resourceVersion: a quorum read); errors are swallowed."""
        try:
            await self.request("GET", path, params={"limit": "1"})
        except (KubeApiError, OSError):
            pass


class EndlessBackoffs:
    """kopf's request retries, without an end: kopf's default (1, 1, 2, 3, 5, 8, 13, 21) runs out after
    about 90 s, and a watch whose retries ran out stays dead. Every iteration starts again."""

    def __init__(self, first: tuple[float, ...] = OperatorConfig.api_backoffs,
                 then: float = OperatorConfig.api_backoff_then) -> None:
        self.first, self.then = first, then

    def __iter__(self) -> Any:
        yield from self.first
        while True:
            yield self.then


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:200]
