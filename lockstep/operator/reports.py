"""The report endpoint: ``POST /v1/reports`` over HTTPS, in the operator's event loop.

Who is calling is decided by a TokenReview of the bearer token (audience ``lockstep.dev``): the pod's
namespace comes from the service account, its name and uid from the token's ``extra`` claims, never
from the body. Checks run cheapest first, and the body is read only once the caller is known.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time

from aiohttp import web
from lockstep.operator.config import OperatorConfig
from lockstep.operator.freshness import FreshnessBook, StaleReport
from lockstep.operator.kube import KubeApiError
from lockstep.operator.metrics import Metrics
from lockstep.operator.outage import ApiOutage, ApiUnavailable
from lockstep.operator.replicas.membership import Membership
from lockstep.operator.conditions import VerdictNotWritten
from lockstep.operator.reconciler import DefinitionsRequired, Reconciler
from lockstep.operator.replicas.relay import RELAYED_FOR_HEADER, RelayFailed, ReportRelay
from lockstep.operator.replicas.ownership import UNKNOWN, Remote
from lockstep.operator.report_limits import ConnectionLimit, RateLimiter
from lockstep.operator.skew_watch import SkewWatch
from lockstep.operator.verdict_watch import VerdictWatch
from lockstep.operator.callers import (
    AUDIENCE,
    Callers,
    Identity,
    ReportRejected,
    TokenReviewer,
    not_serving,
    refusal_response,
    token_key,
)

from lockstep.core.errors import InterfaceError
from lockstep.core.model import loads_strict
from lockstep.core.names import REPORT_PATH
from lockstep.core.refusals import Refusal
from lockstep.core.wire import VERDICTS_PATH, AnswerVerdict, ReplicaAddress, ReportAnswer
from lockstep.core.report import Freshness, Observation, ProxyReport

# AUDIENCE, Identity, ReportRejected, TokenReviewer and token_key are lockstep.operator.callers' (who calls the
# edge); importable from here too.
__all__ = ["AUDIENCE", "Identity", "ReportRejected", "ReportServer", "TokenReviewer", "parse_report", "token_key"]

logger = logging.getLogger(__name__)

#: Encoded answers kept (ReportServer._accepted).
ANSWER_CACHE_SIZE = 1024


class NotServing(Exception):
    """This replica does not serve reports now (not synced yet), or cannot pass one on to its owner."""


class Misrouted(Exception):
    """A report for a pod another replica owns: relayed to ``endpoint`` (None: the owner is not known)."""

    def __init__(self, endpoint: ReplicaAddress | None) -> None:
        super().__init__(str(endpoint))
        self.endpoint = endpoint


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
        #: Who calls: the token's pod, checked the same way for a report and a verdict watch.
        self.callers = Callers(reviewer, self.sources, self._source, reconciler.cache, reconciler.selecting)
        self.freshness = FreshnessBook(config.max_clock_skew)
        self.skew = SkewWatch.of(reconciler, metrics)  # the version-skew policy: an Event and a metric, no verdict
        #: The report duration histogram's children by outcome (labels() looked up once: they are never removed).
        self._durations = {outcome: metrics.report_duration.labels(outcome)
                           for outcome in ("accepted", "rejected", "relayed")}
        #: Encoded 202 answers by what they say (an answer without an approved section is a function of its
        #: verdict, digests and reportTo alone: nothing to invalidate); bounded, the oldest go first.
        self._answers: dict[tuple[AnswerVerdict, bool, ReplicaAddress | None, float | None], bytes] = {}
        #: GET /v1/verdicts: proxy sidecars' long polls (lockstep.operator.verdict_watch).
        self.verdicts = VerdictWatch(reconciler, self.callers, self._rejected, self.serving, self.outage)
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
            return not_serving()
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
        return refusal_response(rejection)

    async def _pass_on(self, request: web.Request, endpoint: ReplicaAddress | None) -> web.Response:
        """A report for a pod another replica owns goes to that replica, once."""
        if endpoint is None or RELAYED_FOR_HEADER in request.headers:
            # The owner is not known yet, or the report was relayed already (two replicas that disagree
            # on the owner for a moment): the sidecar sends it again in a second.
            return not_serving()
        try:
            return await self._relay(request, endpoint)
        except ReportRejected as rejection:
            return self._rejected(rejection)
        except RelayFailed as failure:
            logger.warning("Cannot relay a report: %s", failure)
            return not_serving()

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
        identity = await self.callers.identify(request, self.limiter, "reports")
        pod = self.callers.pod(identity)
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
