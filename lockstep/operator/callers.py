"""Who calls the operator's report edge (``POST /v1/reports`` and the verdict watch, ``GET /v1/verdicts``): a
sidecar's pod, from a TokenReview of its bearer token (audience ``lockstep.dev``), never from the request. Checks
run cheapest first: the token's shape, the per-source bucket of unknown tokens, the review (cached both ways),
the per-pod rate, then the pod itself (it exists, its uid is the token's, an interface selects it). Refusals are
:class:`ReportRejected`, one row of lockstep.core.refusals each.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lockstep.core.names import TOKEN_AUDIENCE
from lockstep.core.refusals import Refusal
from lockstep.operator.cache import PodRecord
from lockstep.operator.kube import KubeApiError, KubeClient
from lockstep.operator.outage import ApiOutage, ApiUnavailable
from lockstep.operator.report_limits import RateLimiter, token_shaped

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache

__all__ = ["AUDIENCE", "Callers", "Identity", "ReportRejected", "TokenReviewer", "bearer", "not_serving",
           "refusal_response", "token_key"]

logger = logging.getLogger("lockstep.operator.reports")

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


def not_serving() -> web.Response:
    # Closed with the answer: the retry opens a new connection, which the Service may send to another replica.
    return refusal_response(ReportRejected(Refusal.NOT_SERVING, "this replica does not serve reports now"))


def refusal_response(rejection: ReportRejected) -> web.Response:
    headers = {"Retry-After": str(max(1, round(rejection.retry_after)))} if rejection.retry_after else None
    response = web.json_response({"reason": rejection.reason, "message": str(rejection)},
                                 status=rejection.status, headers=headers)
    if rejection.refusal.closes:
        response.force_close()  # a body it never read, or a retry that should take a new connection
    return response


def bearer(request: web.Request) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ReportRejected(Refusal.UNAUTHENTICATED, "a bearer token is required")
    return token.strip()


class Callers:
    """The checks every call of the report edge passes, in order (:meth:`identify`, then :meth:`pod`)."""

    def __init__(self, reviewer: TokenReviewer, sources: RateLimiter | None,
                 source_of: Callable[[web.Request], str], cache: ClusterCache,
                 selects: Callable[[PodRecord], Any]) -> None:
        self.reviewer = reviewer
        self.sources = sources
        self._source_of = source_of
        self._cache = cache
        self._selects = selects

    async def identify(self, request: web.Request, per_pod: RateLimiter, what: str) -> Identity:
        """The calling pod; ``per_pod`` bounds its calls (``what``: them, in the refusal)."""
        token = bearer(request)
        key = token_key(token)  # hashed once for the cache look-ups
        known = self.reviewer.known(token, key)
        if not known and not token_shaped(token):
            raise ReportRejected(Refusal.UNAUTHENTICATED, "the bearer token is not a service-account token")
        if self.sources is not None and not known:
            wait = self.sources.admit(self._source_of(request))
            if wait:
                raise ReportRejected(Refusal.RATE_LIMITED, "too many unknown tokens from this address",
                                     retry_after=wait)
        identity = await self.reviewer.identify(token, key)
        wait = per_pod.admit(identity.pod_uid)
        if wait:
            raise ReportRejected(Refusal.RATE_LIMITED, f"too many {what} from this pod", retry_after=wait)
        return identity

    def pod(self, identity: Identity) -> PodRecord:
        """The caller's pod as the operator's cache has it: it exists, it is the token's, an interface selects it."""
        pod = self._cache.pod(identity.namespace, identity.pod_name)
        if pod is None or pod.deleting:
            raise ReportRejected(Refusal.UNKNOWN_POD, f"pod {identity.namespace}/{identity.pod_name} does not exist")
        if pod.uid != identity.pod_uid:
            raise ReportRejected(Refusal.UID_MISMATCH, f"pod {identity.pod_name} has another uid than the token's")
        if not self._selects(pod):
            raise ReportRejected(Refusal.NOT_SELECTED, f"no MCPServerInterface selects pod {identity.pod_name}")
        return pod
