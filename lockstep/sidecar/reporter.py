"""Delivery of observations to the operator's report endpoint (``POST /v1/reports``).

The reporter keeps one slot: the newest observation not yet delivered. A probe
never waits for the operator; when the operator is down the reporter retries
with capped exponential backoff (with jitter), and an observation made in the
meantime replaces the one waiting, so the operator always gets the latest.
The projected token is read from its file before every attempt: the kubelet
rotates it.

With several operator replicas, each pod's reports are judged by the replica that
owns its MCPServerInterface; one sent through the Service to another replica is
relayed, a second HTTPS hop. The owner's answer names its address (``reportTo``),
and the next report goes straight there, verified against the Service's
certificate name as before. Any failure there sends the report through the Service.

Every report carries this sidecar's Lockstep version (``sidecarVersion``), which the operator checks
against its version-skew policy (docs/upgrades.md).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import logging
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx2

from lockstep import __version__
from lockstep.core.digest import InterfaceDigest
from lockstep.core.names import REPORT_PATH
from lockstep.core.refusals import Refusal, SidecarAction, retried_statuses
from lockstep.core.report import FailureReason, Freshness, Observation, ProxyReport, report_body
from lockstep.core.wire import AnswerVerdict, ApprovedComponents, ReplicaAddress, ReportAnswer
from lockstep.sidecar.metrics import SidecarMetrics
from lockstep.sidecar.proxy import WithheldLog

__all__ = ["Delivery", "Reporter", "TokenUnavailableError", "next_retry", "refusal_reason"]

logger = logging.getLogger("lockstep.sidecar")

#: The operator could not take the report now: count it as failed and retry (lockstep.core.refusals' table,
#: and the answers of a gateway between).
RETRIED_STATUSES = retried_statuses(SidecarAction.RETRY)
#: The operator holds no definitions for a digest-only report: the full report goes at once.
DEFINITIONS_REQUIRED = 428
#: The operator's body limit: the observation is reported again as an invalid interface.
TOO_LARGE = Refusal.TOO_LARGE.status
#: Refusals that can be transient: the operator's cache has not seen the new pod (404) or its
#: MCPServerInterface (403) yet, or a TokenReview failed (401). Counted as rejected, retried.
RETRIED_REJECTIONS = retried_statuses(SidecarAction.RETRY_REJECTED)
#: A replica named by ``reportTo`` that does not accept a connection this soon is given up for the Service.
DIRECT_CONNECT_TIMEOUT = 2.0
#: A replica's address that failed is not tried again for this long, whatever the answers name: a path
#: that does not work (a NetworkPolicy, a certificate without the pod's route) must not cost every report.
DIRECT_PAUSE = 300.0


@dataclass(frozen=True)
class Delivery:
    """The operator's answer to one delivered observation."""

    observation: Observation
    status: int
    #: The answer to an accepted report (None: refused, or an answer the sidecar cannot use).
    answer: ReportAnswer | None = None
    #: A refusal's reason (lockstep.core.refusals: ``NotSelected``, ``UnknownPod``...; None: accepted, or none given).
    refusal: str | None = None

    @property
    def verdict(self) -> AnswerVerdict | None:
        return self.answer.verdict if self.answer is not None else None

    @property
    def approved(self) -> ApprovedComponents | None:
        """In proxy mode: the approved components the operator answered with (the proxy's gate)."""
        return self.answer.approved if self.answer is not None else None


class TokenUnavailableError(OSError):
    """The projected token file is missing or empty."""


class Reporter:
    def __init__(self, url: str, token_path: Path, client: httpx2.AsyncClient, metrics: SidecarMetrics, *,
                 min_backoff: float = 0.5, max_backoff: float = 30.0,
                 on_delivered: Callable[[Delivery], None] | None = None,
                 withheld: WithheldLog | None = None) -> None:
        self._url, self._token_path, self._client, self._metrics = url, token_path, client, metrics
        parts = urlsplit(url)
        #: The Service's scheme and name: a replica reached by its address must present the same certificate.
        self._scheme, self._server_name = parts.scheme, parts.hostname
        #: The replica the last answer named, where the next report goes; None: the Service.
        self.report_to: ReplicaAddress | None = None
        self._paused: tuple[ReplicaAddress, float] | None = None  # the address that failed, and until when it is not tried
        self._min_backoff, self._max_backoff = min_backoff, max_backoff
        self._on_delivered = on_delivered
        self._withheld = withheld  # proxy mode: every report carries a proxy section
        self._pending: Observation | None = None
        #: Since when reports fail (monotonic), and how many: one warning per outage, not per retry.
        self._failing: tuple[float, int] | None = None
        self._wake = asyncio.Event()
        self.last_delivery: Delivery | None = None
        # Freshness: this process's random boot id and start time, and a sequence number per send, so
        # that the operator can refuse a report it has seen (or an older one) sent again.
        self.boot_id, self.boot_time = secrets.token_hex(16), _utc_now()
        self._sequence = itertools.count()
        #: The digests of the last observation the operator accepted (202): while the interface stays
        #: the same, reports carry digests only (the operator holds the definitions).
        self._accepted: InterfaceDigest | None = None

    def resubmit(self) -> None:
        """Send the last observation again (with what the proxy withheld since), unless one is waiting."""
        if self._pending is None and self.last_delivery is not None:
            self.submit(self.last_delivery.observation)

    def submit(self, observation: Observation) -> None:
        """Queue ``observation`` for delivery, replacing one that has not been sent yet."""
        self._pending = observation
        self._wake.set()

    async def run(self) -> None:
        """Deliver observations until cancelled; never raises."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            observation, self._pending = self._pending, None
            if observation is None:
                continue
            try:
                await self._deliver(observation)
            except Exception:  # never let the reporter die: the next observation gets a new try
                logger.exception("Unexpected error while reporting")

    async def _deliver(self, observation: Observation) -> None:
        backoff = self._min_backoff
        while True:
            retry_after = await self._attempt(observation)
            if retry_after is None:
                return
            delay, backoff = next_retry(retry_after, backoff, self._max_backoff)
            try:  # a newer observation cuts the wait short and is sent instead
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except TimeoutError:
                continue
            self._wake.clear()
            if self._pending is not None:
                observation, self._pending = self._pending, None

    async def _attempt(self, observation: Observation) -> float | None:
        """Send once; None when done (accepted, or refused for good), else the least seconds to wait.
        A digest-only report the operator cannot take (428) is sent again at once with its definitions."""
        proxy = self._withheld.drain() if self._withheld is not None else None
        digests_only = observation.digest is not None and observation.digest == self._accepted
        direct, self.report_to = self.report_to, None  # kept only when the next answer names it again
        try:
            freshness = Freshness(self.boot_id, self.boot_time, next(self._sequence), _utc_now(), __version__)
            body = report_body(observation, freshness, proxy, with_definitions=not digests_only)
            headers = {"Authorization": f"Bearer {self._read_token()}"}
            if direct is None:
                response = await self._client.post(self._url, json=body, headers=headers)
            else:
                response = await self._post_direct(direct, body, headers)
                self._metrics.direct_reports.labels("answered").inc()
        except (httpx2.HTTPError, OSError) as error:
            self._put_back(proxy)
            if direct is not None and not isinstance(error, TokenUnavailableError):
                logger.info("The operator replica at %s cannot be reached (%s); reporting through the Service",
                            direct, _one_line(error))
                self._paused = (direct, time.monotonic() + DIRECT_PAUSE)
                self._metrics.direct_reports.labels("unreachable").inc()
                return await self._attempt(observation)
            self._metrics.reports.labels("failed").inc()
            self._failed(f"Report not delivered, will retry: {_one_line(error)}")
            return 0.0
        if response.status_code in RETRIED_STATUSES:
            self._metrics.reports.labels("failed").inc()
            self._failed(f"Operator answered {response.status_code}, will retry")
            self._put_back(proxy)
            return _retry_after(response)
        if response.status_code == TOO_LARGE and not observation.failed:
            # An interface larger than the operator takes is not left unseen for staleAfter: it is reported at
            # once as an invalid interface (fail closed: the pod is not verified while it serves it).
            self._metrics.reports.labels("rejected").inc()
            self._put_back(proxy)
            logger.error("The operator refused the report as too large (%s bytes): reporting the interface as "
                         "invalid", _body_size(body))
            return await self._attempt(Observation.of_failure(
                FailureReason.INTERFACE_INVALID,
                f"the interface is too large to report: {_body_size(body)} bytes of JSON, more than the operator "
                "accepts (413)", observation.observed_at, view=observation.view))
        if response.status_code == DEFINITIONS_REQUIRED and digests_only:
            logger.debug("The operator asks for the definitions: %s", _one_line(response.text))
            self._accepted = None
            self._put_back(proxy)
            self.report_to = direct  # the definitions go to the replica that asked (not a relay through the Service)
            return await self._attempt(observation)
        accepted = 200 <= response.status_code < 300
        answer = _answer(response) if accepted else None
        # Digests only from now on, if the operator says it takes them (an older one judges them as reported).
        self._accepted = observation.digest if answer is not None and answer.digests else None
        self.report_to = answer.report_to if answer is not None else None
        if self._paused is not None and self.report_to == self._paused[0] and self._paused[1] > time.monotonic():
            self.report_to = None
        if self._failing is not None:
            since, count = self._failing
            logger.info("Operator reached again after %d failed attempts in %.0fs", count,
                        time.monotonic() - since)
            self._failing = None
        self._metrics.reports.labels("accepted" if accepted else "rejected").inc()
        if not accepted:
            logger.error("Operator refused the report: %s %s", response.status_code, _one_line(response.text))
            if response.status_code in RETRIED_REJECTIONS:
                self._put_back(proxy)
        self.last_delivery = Delivery(observation, response.status_code, answer,
                                      None if accepted else refusal_reason(response))
        if self._on_delivered is not None:
            self._on_delivered(self.last_delivery)
        return _retry_after(response) if response.status_code in RETRIED_REJECTIONS else None

    async def _post_direct(self, endpoint: ReplicaAddress, body: object, headers: dict[str, str]) -> httpx2.Response:
        """POST to the replica at ``endpoint``, verifying the Service's certificate name on that address."""
        extensions = {"sni_hostname": self._server_name} if self._scheme == "https" and self._server_name else None
        timeout = httpx2.Timeout(self._client.timeout.read, connect=DIRECT_CONNECT_TIMEOUT)
        return await self._client.post(f"{self._scheme}://{endpoint}{REPORT_PATH}", json=body, headers=headers,
                                       extensions=extensions, timeout=timeout)

    def _failed(self, message: str) -> None:
        """Warn at the first failure of a run of them; the retries that follow log at debug level."""
        if self._failing is None:
            self._failing = (time.monotonic(), 1)
            logger.warning("%s (further retries are logged at debug level until one succeeds)", message)
        else:
            self._failing = (self._failing[0], self._failing[1] + 1)
            logger.debug("%s", message)

    def _put_back(self, proxy: ProxyReport | None) -> None:
        if proxy is not None and self._withheld is not None:
            self._withheld.restore(proxy)

    def read_token(self) -> str:
        """The projected token as it is now (the kubelet rotates it); TokenUnavailableError."""
        return self._read_token()

    def _read_token(self) -> str:
        try:
            token = self._token_path.read_text().strip()
        except OSError as error:
            raise TokenUnavailableError(f"cannot read the token {self._token_path}: {error.strerror}") from None
        if not token:
            raise TokenUnavailableError(f"the token file {self._token_path} is empty")
        return token


def next_retry(retry_after: float, backoff: float, max_backoff: float) -> tuple[float, float]:
    """The wait before the next attempt, and the backoff after it.

    An operator that names its time (``Retry-After``: a standby replica, a full TokenReview queue)
    is taken at its word, with up to 20% jitter so that pods turned away together come back apart,
    and the backoff does not grow: eleven 503s from a standby replica must not turn into a
    30-second wait. Without one (no answer at all) the wait doubles up to ``max_backoff``.
    """
    if retry_after > 0:
        return retry_after * random.uniform(1.0, 1.2), backoff
    return backoff * random.uniform(0.5, 1.0), min(backoff * 2, max_backoff)


def _body_size(body: object) -> int:
    return len(json.dumps(body, separators=(",", ":")))


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _retry_after(response: httpx2.Response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", "0")), 300.0)
    except ValueError:
        return 0.0


def refusal_reason(response: httpx2.Response) -> str | None:
    """The ``reason`` of a refusal's JSON body (the operator's: lockstep.core.refusals), or None."""
    try:
        body = response.json()
    except ValueError:
        return None
    reason = body.get("reason") if isinstance(body, dict) else None
    return reason if isinstance(reason, str) and len(reason) <= 64 else None


def _answer(response: httpx2.Response) -> ReportAnswer | None:
    """The operator's answer to an accepted report; None when it cannot be used (logged): the sidecar then
    sends full reports and its proxy keeps the gate it has (fail closed)."""
    try:
        return ReportAnswer.from_dict(response.json())
    except ValueError as error:  # not JSON, or AnswerError
        logger.error("The operator's answer is unusable, ignoring it: %s", _one_line(error))
        return None


def _one_line(value: object, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text[:limit] or type(value).__name__
