"""The report endpoint: ``POST /v1/reports`` over HTTPS, in the operator's event loop.

Who is calling is decided by a TokenReview of the bearer token (audience ``lockstep.dev``): the pod's
namespace comes from the service account, its name and uid from the token's ``extra`` claims, never
from the body. Checks run cheapest first, and the body is read only once the caller is known.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from lockstep.operator.config import OperatorConfig
from lockstep.operator.freshness import FreshnessBook, StaleReport
from lockstep.operator.cache import PodRecord
from lockstep.operator.kube import KubeApiError, KubeClient
from lockstep.operator.metrics import Metrics
from lockstep.operator.outage import ApiOutage, ApiUnavailable
from lockstep.operator.replicas.membership import Membership
from lockstep.operator.conditions import VerdictNotWritten
from lockstep.operator.reconciler import DefinitionsRequired, Reconciler
from lockstep.operator.replicas.relay import RELAYED_FOR_HEADER, RelayFailed, ReportRelay
from lockstep.operator.replicas.ownership import UNKNOWN, Remote
from lockstep.operator.report_limits import ConnectionLimit, RateLimiter, token_shaped
from lockstep.operator.skew_watch import SkewWatch
from lockstep.operator.verdict_watch import VerdictWatch

from lockstep.core.errors import InterfaceError
from lockstep.core.model import loads_strict
from lockstep.core.names import REPORT_PATH, TOKEN_AUDIENCE
from lockstep.core.refusals import Refusal
from lockstep.core.wire import VERDICTS_PATH, AnswerVerdict, ReplicaAddress, ReportAnswer
from lockstep.core.report import Freshness, Observation, ProxyReport

__all__ = ["AUDIENCE", "Identity", "ReportRejected", "ReportServer", "TokenReviewer"]

logger = logging.getLogger(__name__)

AUDIENCE = TOKEN_AUDIENCE
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
TOKEN_CACHE_SIZE = 50_000
#: TokenReviews in flight at once; a report that cannot get a place within the wait is answered 503.
MAX_CONCURRENT_REVIEWS = 16
REVIEW_QUEUE_WAIT = 2.0
#: A token the API server refused is refused again without asking for this long (bounded cache).
NEGATIVE_TTL = 30.0
NEGATIVE_CACHE_SIZE = 20_000
#: Encoded answers kept (ReportServer._accepted).
ANSWER_CACHE_SIZE = 1024


class ReportRejected(Exception):
    """A report the endpoint refuses: one of lockstep.core.refusals.Refusal, with a message for the sidecar's
    log (and a Retry-After of its own where the refusal's depends on the moment)."""

    def __init__(self, refusal: Refusal, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.retry_after = retry_after if retry_after is not None else refusal.retry_after

    @property
    def status(self) -> int:
        return self.refusal.status

    @property
    def reason(self) -> str:
        return self.refusal.reason


class NotServing(Exception):
    """This replica does not serve reports now (not synced yet), or cannot pass one on to its owner."""


class Misrouted(Exception):
    """A report for a pod another replica owns: relayed to ``endpoint`` (None: the owner is not known)."""

    def __init__(self, endpoint: ReplicaAddress | None) -> None:
        super().__init__(str(endpoint))
        self.endpoint = endpoint


@dataclass(frozen=True)
class Identity:
    namespace: str
    pod_name: str
    pod_uid: str


class TokenReviewer:
    """Reviews bearer tokens; a reviewed token is trusted for a short while (a bounded cache)."""

    def __init__(self, client: KubeClient, ttl: float, *, concurrency: int = MAX_CONCURRENT_REVIEWS,
                 outage: ApiOutage | None = None) -> None:
        self._client = client
        self._outage = outage
        self._ttl = ttl
        self._cache: OrderedDict[str, tuple[float, Identity]] = OrderedDict()
        self._refused: OrderedDict[str, tuple[float, ReportRejected]] = OrderedDict()
        self._slots = asyncio.Semaphore(concurrency)
        self.reviews = 0  # TokenReviews sent to the API server

    def known(self, token: str, key: str | None = None) -> bool:
        """Whether ``token`` is answered from a cache (costs no TokenReview). ``key``: the token's
        ``token_key``, when the caller has it already."""
        key = key or token_key(token)
        return _fresh(self._cache.get(key)) or _fresh(self._refused.get(key))

    async def identify(self, token: str, key: str | None = None) -> Identity:
        key = key or token_key(token)
        cached = self._cache.get(key)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        refused = self._refused.get(key)
        if refused and refused[0] > time.monotonic():
            raise refused[1]
        if self._outage is not None and self._outage.active:
            if cached:
                # Reviewed before and expired while the API is away: no review is possible, and the pod's
                # existence and uid are still checked against the cache (no pod can be deleted meanwhile).
                return cached[1]
            raise ApiUnavailable("the Kubernetes API is unreachable: no TokenReview now")
        try:
            await asyncio.wait_for(self._slots.acquire(), REVIEW_QUEUE_WAIT)
        except TimeoutError:
            raise ReportRejected(Refusal.OVERLOADED, "too many token reviews in flight") from None
        try:
            self.reviews += 1
            status = await self._client.token_review(token, [AUDIENCE])
        except ApiUnavailable:
            raise  # answered 503 with Retry-After, not 401: the token may well be good
        except (KubeApiError, OSError) as error:
            logger.warning("TokenReview failed: %s", error)
            raise ReportRejected(Refusal.UNAUTHENTICATED, "the token could not be reviewed") from None
        finally:
            self._slots.release()
        try:
            identity = _identity(status)
        except ReportRejected as rejection:
            _remember(self._refused, key, (time.monotonic() + NEGATIVE_TTL, rejection), NEGATIVE_CACHE_SIZE)
            raise
        _remember(self._cache, key, (time.monotonic() + self._ttl, identity), TOKEN_CACHE_SIZE)
        return identity


def token_key(token: str) -> str:
    """What the caches know a token by: its SHA-256 (the token itself is never kept)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _fresh(entry: tuple[float, Any] | None) -> bool:
    return entry is not None and entry[0] > time.monotonic()


def _remember(cache: OrderedDict[str, Any], key: str, value: Any, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > size:
        cache.popitem(last=False)


def _identity(status: dict[str, Any]) -> Identity:
    if not status.get("authenticated"):
        raise ReportRejected(Refusal.UNAUTHENTICATED, "the token is not valid")
    audiences = status.get("audiences")
    if audiences is not None and AUDIENCE not in audiences:
        raise ReportRejected(Refusal.UNAUTHENTICATED, f"the token is not meant for {AUDIENCE}")
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    extra = user.get("extra") or {}
    names, uids = extra.get(POD_NAME_CLAIM) or [], extra.get(POD_UID_CLAIM) or []
    if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not names or not uids:
        raise ReportRejected(Refusal.UNAUTHENTICATED, "the token is not bound to a pod")
    namespace = username[len(SERVICE_ACCOUNT_PREFIX):].split(":", 1)[0]
    return Identity(namespace, str(names[0]), str(uids[0]))


class ReportServer:
    def __init__(self, config: OperatorConfig, reconciler: Reconciler, reviewer: TokenReviewer,
                 metrics: Metrics, outage: ApiOutage | None = None, membership: Membership | None = None) -> None:
        self.config = config
        #: With several replicas: who owns which pod, and where (a report for another's pod is relayed).
        self.membership = membership
        self.relay = ReportRelay(report_url=config.report_url, ca_path=config.operator_ca_path,
                                 tls=config.tls_enabled) if membership is not None else None
        self.outage = outage or ApiOutage()
        self.reconciler = reconciler
        self.reviewer = reviewer
        self.metrics = metrics
        self.limiter = RateLimiter(config.rate_per_pod, config.rate_burst)
        # Before authentication: a request with a token no cache knows costs a TokenReview, so each
        # source address gets a bucket of those (0 turns it off).
        self.sources = RateLimiter(config.source_rate, config.source_burst) if config.source_rate > 0 else None
        self.freshness = FreshnessBook(config.max_clock_skew)
        self.skew = SkewWatch.of(reconciler, metrics)  # the version-skew policy: an Event and a metric, no verdict
        #: The report duration histogram's children by outcome (labels() looked up once: they are never removed).
        self._durations = {outcome: metrics.report_duration.labels(outcome)
                           for outcome in ("accepted", "rejected", "relayed")}
        #: Encoded 202 answers by what they say (an answer without an approved section is a function of its
        #: verdict, digests and reportTo alone: nothing to invalidate); bounded, the oldest go first.
        self._answers: dict[tuple[AnswerVerdict, bool, ReplicaAddress | None, float | None], bytes] = {}
        #: GET /v1/verdicts: proxy sidecars' long polls (lockstep.operator.verdict_watch).
        self.verdicts = VerdictWatch(self)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.body_limit)
        app.router.add_post(REPORT_PATH, self.handle_report)
        app.router.add_get(VERDICTS_PATH, self.verdicts.handle)
        app.router.add_get("/readyz", self.handle_ready)
        app.router.add_get("/healthz", self.handle_health)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                                     keepalive_timeout=self.config.keepalive_timeout)
        await self._runner.setup()
        assert self._runner.server is not None
        self.connections = ConnectionLimit(self.config.connections_per_source, exempt=self._peer_hosts)
        self.connections.install(self._runner.server)
        site = web.TCPSite(self._runner, self.config.report_host, self.config.report_port,
                           ssl_context=self._ssl_context())
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.config.report_port
        logger.info("Report endpoint listening on port %s.", self.port)

    async def stop(self) -> None:
        self.verdicts.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.relay is not None:
            await self.relay.close()

    def _peer_hosts(self) -> frozenset[str]:
        """The other replicas' addresses: relays carry many pods' reports on few connections."""
        return self.membership.peer_hosts if self.membership is not None else frozenset()

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self.config.tls_enabled:
            logger.warning("No TLS files configured: the report endpoint serves plain HTTP (tests only).")
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.config.tls_cert_path), str(self.config.tls_key_path))
        return context

    def serving(self) -> bool:
        return self.reconciler.synced.is_set()

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def handle_ready(self, request: web.Request) -> web.Response:
        if self.serving():
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not serving (syncing)"}, status=503)

    async def handle_report(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        outcome = "rejected"
        try:
            if not self.serving():
                raise NotServing()
            answer = await self._judge(request)
            outcome = "accepted"
            return self._accepted(answer)
        except DefinitionsRequired as missing:
            # Not a refusal (not counted in lockstep_reports_rejected_total): the sidecar sends the same
            # observation again at once, with its definitions.
            return web.json_response({"reason": "DefinitionsRequired",
                                      "message": f"send the report again with its definitions: {missing}"},
                                     status=428)
        except Misrouted as misrouted:
            response = await self._pass_on(request, misrouted.endpoint)
            outcome = "relayed" if response.status != 503 else outcome
            return response
        except NotServing:
            return _not_serving()
        except ApiUnavailable:
            # The API server is away (logged once per outage by lockstep.operator.outage): the verdict
            # could not be written, and the sidecar sends its report again after Retry-After.
            self.outage.answered_503 += 1
            return self._rejected(ReportRejected(Refusal.API_UNAVAILABLE, "the Kubernetes API is unreachable; send "
                                                 "the report again", retry_after=self.outage.retry_after()))
        except ReportRejected as rejection:
            return self._rejected(rejection)
        except (VerdictNotWritten, KubeApiError) as error:
            # The verdict did not land (it is written again every write_retry_interval until it does): the
            # sidecar is told to send its report again; nothing it sent is lost.
            logger.warning("Report taken, verdict not written: %s", error)
            return self._rejected(ReportRejected(Refusal.NOT_WRITTEN, "the verdict could not be written yet; "
                                                 "send the report again"))
        finally:
            self._durations[outcome].observe(time.perf_counter() - started)

    def _accepted(self, answer: ReportAnswer) -> web.Response:
        """The 202 of an accepted report: as web.json_response writes it, its body encoded once per answer."""
        if answer.approved is not None:
            return web.json_response(answer.to_dict(), status=202)
        key = (answer.verdict, answer.digests, answer.report_to, answer.stale_after)
        body = self._answers.get(key)
        if body is None:
            body = self._answers[key] = json.dumps(answer.to_dict()).encode()
            if len(self._answers) > ANSWER_CACHE_SIZE:
                del self._answers[next(iter(self._answers))]
        return web.Response(body=body, status=202, content_type="application/json", charset="utf-8")

    def _rejected(self, rejection: ReportRejected) -> web.Response:
        if rejection.refusal.counted:
            self.metrics.reports_rejected.labels(rejection.reason).inc()
        return _refusal_response(rejection)

    async def _pass_on(self, request: web.Request, endpoint: ReplicaAddress | None) -> web.Response:
        """A report for a pod another replica owns goes to that replica, once."""
        if endpoint is None or RELAYED_FOR_HEADER in request.headers:
            # The owner is not known yet, or the report was relayed already (two replicas that disagree
            # on the owner for a moment): the sidecar sends it again in a second.
            return _not_serving()
        try:
            return await self._relay(request, endpoint)
        except ReportRejected as rejection:
            return self._rejected(rejection)
        except RelayFailed as failure:
            logger.warning("Cannot relay a report: %s", failure)
            return _not_serving()

    async def _relay(self, request: web.Request, endpoint: ReplicaAddress) -> web.Response:
        """The relaying replica's part, once the token is reviewed here (``_judge`` reached Misrouted):
        the body, read within the deadline, goes to the owner as it came; the owner reviews it again."""
        assert self.relay is not None
        body = await _read_body(request, self.config.body_limit, self.config.body_read_timeout)
        return await self.relay.send(request, body, endpoint)

    def _source(self, request: web.Request) -> str:
        """The caller's address; for a report a live peer relayed, the address the peer names."""
        remote = request.remote or "unknown"
        relayed_for = request.headers.get(RELAYED_FOR_HEADER)
        if relayed_for and self.membership is not None and remote in self.membership.peer_hosts:
            return relayed_for
        return remote

    async def _judge(self, request: web.Request) -> ReportAnswer:
        length = request.content_length
        if length is not None and length > self.config.body_limit:
            raise ReportRejected(Refusal.TOO_LARGE, f"the report is larger than {self.config.body_limit} bytes")
        token = _bearer(request)
        key = token_key(token)  # hashed once for the three cache look-ups below
        known = self.reviewer.known(token, key)
        if not known and not token_shaped(token):
            raise ReportRejected(Refusal.UNAUTHENTICATED, "the bearer token is not a service-account token")
        if self.sources is not None and not known:
            wait = self.sources.admit(self._source(request))
            if wait:
                raise ReportRejected(Refusal.RATE_LIMITED, "too many unknown tokens from this address",
                                     retry_after=wait)
        identity = await self.reviewer.identify(token, key)
        wait = self.limiter.admit(identity.pod_uid)
        if wait:
            raise ReportRejected(Refusal.RATE_LIMITED, "too many reports from this pod", retry_after=wait)
        pod = self.reconciler.cache.pod(identity.namespace, identity.pod_name)
        if pod is None or pod.deleting:
            raise ReportRejected(Refusal.UNKNOWN_POD, f"pod {identity.namespace}/{identity.pod_name} does not exist")
        if pod.uid != identity.pod_uid:
            raise ReportRejected(Refusal.UID_MISMATCH, f"pod {identity.pod_name} has another uid than the token's")
        if not self.reconciler.selecting(pod):
            raise ReportRejected(Refusal.NOT_SELECTED, f"no MCPServerInterface selects pod {identity.pod_name}")
        route = self.reconciler.ownership.route(pod)
        if isinstance(route, Remote):
            raise Misrouted(route.address)
        if route is UNKNOWN:
            raise Misrouted(None)
        observation, freshness, proxy = parse_report(
            await _read_body(request, self.config.body_limit, self.config.body_read_timeout))
        try:
            stamp = self.freshness.admit(identity.pod_uid, freshness, recorded=pod.report_stamp)
            # The write checks the stamp again against the pod as the API server has it (a write
            # guarded by resourceVersion that meets a newer pod reads it first).
            verdict = await self.reconciler.accept(pod, observation, proxy, stamp=stamp)
        except StaleReport as stale:
            raise ReportRejected(stale.refusal, str(stale)) from None
        if verdict is None:
            if not self.reconciler.ownership.owns_pod(pod):
                raise NotServing()  # handed over to another replica meanwhile: sent again, it goes there
            raise ReportRejected(Refusal.NOT_SELECTED, f"no MCPServerInterface selects pod {identity.pod_name}")
        await self.skew.observe(pod, freshness.sidecar_version)  # judged as usual above, whatever the version
        # "digests": this operator takes digest-only reports (a sidecar never sends one to an operator that
        # does not say so, e.g. after a rollback: that operator would judge the digests as reported);
        # "approved": the proxy's gate, what it may let through.
        # "staleAfter": how long the proxy may go on without another True (the shortest of the resources').
        return ReportAnswer(AnswerVerdict(verdict.status, verdict.reason.value, verdict.message), digests=True,
                            approved=self.reconciler.approved_for(pod) if proxy is not None else None,
                            report_to=self.reconciler.ownership.own_address(),
                            stale_after=min((r.policy.stale_after for r in self.reconciler.selecting(pod)),
                                            default=None))


def _not_serving() -> web.Response:
    # Closed with the answer: the retry opens a new connection, which the Service may send to another replica.
    return _refusal_response(ReportRejected(Refusal.NOT_SERVING, "this replica does not serve reports now"))


def _refusal_response(rejection: ReportRejected) -> web.Response:
    headers = {"Retry-After": str(max(1, round(rejection.retry_after)))} if rejection.retry_after else None
    response = web.json_response({"reason": rejection.reason, "message": str(rejection)},
                                 status=rejection.status, headers=headers)
    if rejection.refusal.closes:
        response.force_close()  # a body it never read, or a retry that should take a new connection
    return response


def _bearer(request: web.Request) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ReportRejected(Refusal.UNAUTHENTICATED, "a bearer token is required")
    return token.strip()


async def _read_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """The body of an authenticated report, read within ``timeout`` seconds (a caller that holds the
    connection open with a slow body is cut off: 408 SlowBody)."""
    try:
        if request.content.is_eof():
            # The whole body has arrived (a report fits in a segment or two): nothing to wait for, so no
            # deadline to arm. (A deadline through asyncio.wait_for would cost a Task and two turns of the
            # event loop per report.) read() still enforces the body limit.
            return await request.read()
        async with asyncio.timeout(timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ReportRejected(Refusal.TOO_LARGE, f"the report is larger than {limit} bytes") from None
    except TimeoutError:
        raise ReportRejected(Refusal.SLOW_BODY, f"the body did not arrive within {timeout:g}s") from None


def parse_report(raw: bytes) -> tuple[Observation, Freshness, ProxyReport | None]:
    """The observation, freshness and proxy section of a report body, or ReportRejected(400) with a
    one-line cause."""
    try:
        body = loads_strict(raw)
        return Observation.from_dict(body), Freshness.from_dict(body), ProxyReport.from_dict(body)
    except (ValueError, json.JSONDecodeError) as error:
        raise ReportRejected(Refusal.BAD_REPORT, f"the body is not JSON: {error}"[:300]) from None
    except InterfaceError as error:  # ReportError, or a NaN in the JSON
        raise ReportRejected(Refusal.BAD_REPORT, str(error)[:300]) from None
