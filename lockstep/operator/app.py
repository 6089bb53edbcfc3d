"""The operator assembled: a kopf registry with Lockstep's handlers, and its servers and timers.

    op = LockstepOperator(OperatorConfig(...))
    await op.run(stop_flag=..., ready_flag=...)      # kopf.operator() with Lockstep's registry
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
from aiohttp import web

from lockstep.core.names import POLICY_PLURAL
from lockstep.core.wire import ReplicaAddress
from lockstep.operator.approval_trust import ApprovalTrust
from lockstep.operator.conditions import VerdictNotWritten
from lockstep.operator.config import OperatorConfig
from lockstep.operator.crd_check import check_crd
from lockstep.operator.events import EventPoster
from lockstep.operator.freshness import OperatorClock
from lockstep.operator.kube import GROUP, PLURAL, VERSION, KubeApiError, api_counts
from lockstep.operator.metrics import Metrics
from lockstep.operator.outage import ApiOutage, ApiUnavailable, EndlessBackoffs, TrackedKubeClient
from lockstep.operator.reconciler import Reconciler
from lockstep.operator.replicas.membership import Membership
from lockstep.operator.reports import ReportServer, TokenReviewer
from lockstep.operator.watch_only import WatchOnlyDiffBase, refuse_changing_handlers

__all__ = ["LockstepOperator"]

logger = logging.getLogger(__name__)
#: How long an urgent status write waits for the other cuts of the same moment (a rollout, a re-judging).
URGENT_COALESCE = 0.1
#: Seconds between two checks of every signed approval (statements and approver keys expire).
APPROVAL_RECHECK_INTERVAL = 60.0
#: A verdict that did not land: kept in Reconciler.unwritten and written again (outage or a failed write).
NOT_WRITTEN = (ApiUnavailable, VerdictNotWritten)


class LockstepOperator:
    def __init__(self, config: OperatorConfig, *, connection: kopf.ConnectionInfo | None = None) -> None:
        self.config = config
        self.connection = connection
        self.metrics = Metrics()
        self.metrics.initialise()
        self.priority = config.peering_priority if config.peering_priority is not None \
            else random.randint(1, 1_000_000)
        self.registry = kopf.OperatorRegistry()
        self.reconciler: Reconciler | None = None
        self.membership: Membership | None = None
        self.report_server: ReportServer | None = None
        self.metrics_port: int | None = None
        self._client: TrackedKubeClient | None = None
        self.outage = ApiOutage()
        self.clock = OperatorClock()
        #: The MCPApprovalPolicy objects: which approved revisions may be trusted (lockstep.operator.approval_trust).
        self.approval_trust = ApprovalTrust()
        self._metrics_runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Rounds of the timers so far, by job (check_stale, flush_status, _retry_writes): the tests wait on
        #: them to know the operator moved past the point where something would have happened.
        self.rounds: Counter[str] = Counter()
        self._register()

    # ------------------------------------------------------------------ kopf
    def settings(self) -> kopf.OperatorSettings:
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False  # Lockstep posts its own Events, on transitions only
        # Every replica watches and serves: kopf's peering would pause all but one. The replicas share
        # the work by resource through Lockstep's own entries in the peering object (lockstep.operator.replicas.membership).
        settings.peering.standalone = True
        settings.watching.server_timeout = 300
        # Raw watch events only: no diff base is copied and compared per event (lockstep.operator.watch_only).
        refuse_changing_handlers(self.registry)
        settings.persistence.diffbase_storage = WatchOnlyDiffBase()
        # Whatever the length of an API outage, the watches come back on their own: kopf's default
        # retries end after about 90 s, and a watch whose retries ended stays dead (docs/operator.md).
        settings.networking.error_backoffs = EndlessBackoffs(self.config.api_backoffs, self.config.api_backoff_then)
        if self.config.tls_enabled and self.config.webhook_port:
            settings.admission.server = kopf.WebhookServer(
                port=self.config.webhook_port, certfile=self.config.tls_cert_path,
                pkeyfile=self.config.tls_key_path)
        return settings

    async def run(self, *, stop_flag: Any = None, ready_flag: Any = None) -> None:
        namespaces = list(self.config.namespaces)
        await kopf.operator(
            registry=self.registry, settings=self.settings(),
            standalone=True, clusterwide=not namespaces, namespaces=namespaces,
            liveness_endpoint=f"http://0.0.0.0:{self.config.health_port}/healthz" if self.config.health_port else None,
            stop_flag=stop_flag, ready_flag=ready_flag,
        )

    def _register(self) -> None:
        registry = self.registry

        @kopf.on.login(registry=registry)
        def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return self.connection or _login(**kwargs)

        @kopf.on.startup(registry=registry)
        async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
            await self.start(settings)

        @kopf.on.cleanup(registry=registry)
        async def stop(**_: Any) -> None:
            await self.stop()

        shard = self.config.shard  # --watch-label-selector: only the resources of this shard

        @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry,
                       labels=shard.kopf_labels() if shard else None)
        async def resource_event(event: kopf.RawEvent, **_: Any) -> None:
            if self.reconciler is not None:
                with contextlib.suppress(*NOT_WRITTEN):  # written again once the API is back
                    await self.reconciler.on_resource(str(event.get("type") or "ADDED"), event["object"])

        if shard is not None:
            @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, when=shard.excludes)
            async def resource_outside_shard(event: kopf.RawEvent, **_: Any) -> None:
                if self.reconciler is not None:  # relabelled out of the shard: another release's now
                    with contextlib.suppress(*NOT_WRITTEN):
                        await self.reconciler.leave_shard(event["object"])

        pod_shard = self.config.pod_shard  # --watch-pod-selector: only the pods of this shard

        @kopf.on.event("", "v1", "pods", registry=registry,
                       labels=pod_shard.kopf_labels() if pod_shard else None)
        async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
            if self.reconciler is not None:
                with contextlib.suppress(*NOT_WRITTEN):  # written again once the API is back
                    await self.reconciler.on_pod(str(event.get("type") or "ADDED"), event["object"])

        if pod_shard is not None:
            @kopf.on.event("", "v1", "pods", registry=registry, when=pod_shard.excludes)
            async def pod_outside_shard(event: kopf.RawEvent, **_: Any) -> None:
                body = event["object"]  # a pod relabelled out of the shard: its sidecar still reports here
                metadata = body.get("metadata") or {}
                if self.reconciler is not None and self.reconciler.cache.pod(
                        str(metadata.get("namespace") or ""), str(metadata.get("name") or "")) is not None:
                    with contextlib.suppress(*NOT_WRITTEN):
                        await self.reconciler.on_pod(str(event.get("type") or "ADDED"), body)

        @kopf.on.event(GROUP, VERSION, POLICY_PLURAL, registry=registry)
        async def approval_policy_event(event: kopf.RawEvent, **_: Any) -> None:
            if self.approval_trust.on_policy(str(event.get("type") or "ADDED"), event["object"]) \
                    and self.reconciler is not None:
                with contextlib.suppress(*NOT_WRITTEN):  # written again once the API is back
                    await self.reconciler.retrust()

        @kopf.on.event("", "v1", "services", registry=registry)
        async def service_event(event: kopf.RawEvent, **_: Any) -> None:
            if self.reconciler is not None:  # enforcement Quarantine: Services that bypass the proxy
                with contextlib.suppress(*NOT_WRITTEN):  # written again once the API is back
                    await self.reconciler.on_service(str(event.get("type") or "ADDED"), event["object"])

        if self.config.tls_enabled and self.config.webhook_port:
            from lockstep.operator.validation import register_validation
            from lockstep.operator.webhooks import register_webhooks

            register_webhooks(registry, self.config, metrics=self.metrics)
            register_validation(registry, self.config, metrics=self.metrics, trust=self.approval_trust)

    # ------------------------------------------------------------------ lifecycle
    async def start(self, settings: kopf.OperatorSettings) -> None:
        info = self.connection or _login(settings=settings)
        if info is None:
            raise kopf.PermanentError("no Kubernetes credentials (neither in-cluster nor a kubeconfig)")
        self._client = client = TrackedKubeClient(info, self.outage)
        await check_crd(client, self.metrics.crd_missing_fields, EventPoster(client))  # logs, an Event, a gauge
        # With watched namespaces, the peering object is a KopfPeering in the operator's own namespace (never a
        # tenant's: whoever patches it decides the owners); cluster-wide, the ClusterKopfPeering.
        namespace = (self.config.own_namespace or self.config.namespaces[0]) if self.config.namespaces else None
        self.membership = membership = Membership(client, self.config.peering_name, self.priority, namespace,
                                                  lifetime=self.config.peering_lifetime)
        await membership.refresh()
        await self._load_approval_policies(client)  # before any resource is judged: no window of unsigned trust
        self.reconciler = reconciler = Reconciler(self.config, client, self.metrics, EventPoster(client),
                                                  membership, clock=self.clock, approval_trust=self.approval_trust)
        await reconciler.resync()
        self.report_server = ReportServer(
            self.config, reconciler, TokenReviewer(client, self.config.token_cache_seconds, outage=self.outage),
            self.metrics, self.outage, membership=membership if self.config.peering_name else None)
        await self.report_server.start()
        if self.config.advertise_address and self.config.peering_name:
            membership.endpoint = ReplicaAddress.of(self.config.advertise_address, self.report_server.port)
            await membership.refresh()  # published now: the others relay to it from their next refresh
        await self._start_metrics()
        self._tasks = [
            asyncio.create_task(self.clock.run()),
            asyncio.create_task(_every(self.config.stale_check_interval, reconciler.check_stale, self.rounds)),
            asyncio.create_task(self._flush_loop()),
            asyncio.create_task(_every(self.config.write_retry_interval, self._retry_writes, self.rounds)),
            asyncio.create_task(self._follow_outages(client, reconciler)),
            asyncio.create_task(_freeze_heap_now_and_then()),
            asyncio.create_task(_every(APPROVAL_RECHECK_INTERVAL, self._recheck_approvals, self.rounds)),
        ]
        if self.config.peering_name:
            self._tasks.append(asyncio.create_task(self._follow_membership(membership, reconciler)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.membership is not None:
            await self.membership.leave()  # the others take this replica's resources at their next heartbeat
        if self.reconciler is not None:
            with contextlib.suppress(Exception):
                await self.reconciler.flush_status(final=True)
            await self.reconciler.events.drain()
        if self.report_server is not None:
            await self.report_server.stop()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        if self._client is not None:
            await self._client.close()

    async def _load_approval_policies(self, client: TrackedKubeClient) -> None:
        """Every MCPApprovalPolicy, before the first resource is judged (no CRD installed: there are none)."""
        try:
            policies = await client.list_all(f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}")
        except KubeApiError as error:
            if error.status != 404:
                raise
            return
        for body in policies:
            self.approval_trust.on_policy("ADDED", body)

    async def _recheck_approvals(self) -> None:
        """Signed statements and approver keys expire: judge the approvals again now and then (the floors they
        raise are written with the next status flush)."""
        assert self.reconciler is not None
        await self.reconciler.retrust()

    async def _start_metrics(self) -> None:
        if self.config.metrics_port is None:
            return
        app = web.Application()
        app.router.add_get("/metrics", self.metrics.serve)
        app.router.add_get("/debug/api-requests", self._api_requests)
        self._metrics_runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._metrics_runner.setup()
        site = web.TCPSite(self._metrics_runner, self.config.metrics_host, self.config.metrics_port)
        await site.start()
        sockets = getattr(getattr(site, "_server", None), "sockets", None) or []
        self.metrics_port = sockets[0].getsockname()[1] if sockets else self.config.metrics_port

    async def _api_requests(self, request: web.Request) -> web.Response:
        """The operator's own API requests so far (bench/operator.py reads them per phase)."""
        return web.json_response(api_counts(self._client) if self._client is not None else {})

    async def _flush_loop(self) -> None:
        """The resources' status every status_flush_interval, and at once (after URGENT_COALESCE, so that a
        burst of cuts goes in one write per resource) when a pod was just cut or drifted."""
        reconciler = self.reconciler
        assert reconciler is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reconciler.state.status_urgent.wait(), self.config.status_flush_interval)
                await asyncio.sleep(URGENT_COALESCE)
            reconciler.state.status_urgent.clear()
            try:
                await reconciler.flush_status()
                await self.approval_trust.write_floors(reconciler.client)  # nothing to write: no request
            except ApiUnavailable:
                pass  # logged once per outage (lockstep.operator.outage)
            except Exception:  # the loop must survive one failed round
                logger.exception("Status flush failed.")
            self.rounds["flush_status"] += 1

    async def _retry_writes(self) -> None:
        """Verdicts that did not land, written again until each lands or its pod is gone (fail closed)."""
        assert self.reconciler is not None
        if self.reconciler.state.unwritten and not self.outage.active:
            await self.reconciler.retry_unwritten()

    async def _follow_outages(self, client: TrackedKubeClient, reconciler: Reconciler) -> None:
        """While the API server is away, ask it once a second whether it is back (a report may not
        need it), then write what waited at once."""
        namespace = self.config.namespaces[0] if self.config.namespaces else None
        while True:
            await self.outage.began.wait()
            while self.outage.active:
                await asyncio.sleep(self.config.api_probe_interval)
                await client.probe(client.pods_path(namespace))
            with contextlib.suppress(*NOT_WRITTEN):
                await reconciler.retry_unwritten()

    async def _follow_membership(self, membership: Membership, reconciler: Reconciler) -> None:
        """Renew this replica's entry; when replicas came or went, hand over and take up resources."""
        while True:
            await asyncio.sleep(self.config.peering_heartbeat)
            try:
                if await membership.refresh():
                    await reconciler.rebalance()
            except Exception:  # the heartbeat must survive one failed round, or this replica's entry expires
                logger.exception("Membership round failed; trying again in %s s.", self.config.peering_heartbeat)


#: The first heap freeze comes once the start's lists are in memory, the next ones this often.
HEAP_FIRST_FREEZE, HEAP_FREEZE_INTERVAL = 30.0, 300.0


async def _freeze_heap_now_and_then() -> None:
    """Keep the long-lived heap (every pod's record, kopf's state) out of the cyclic garbage collector's
    full collections: at 10,000 pods those took 18 % of the operator's CPU (py-spy, bench/operator.py
    1000x10), each report's short-lived objects setting one off now and then. ``gc.freeze`` moves every
    object alive now to a generation the collector skips; objects freed later still go by reference
    counting, and the unfreeze before each round's ``gc.collect`` gives cycles among them back to the
    collector, so none outlives a round."""
    await asyncio.sleep(HEAP_FIRST_FREEZE)
    while True:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        await asyncio.sleep(HEAP_FREEZE_INTERVAL)


async def _every(interval: float, job: Callable[[], Awaitable[None]], rounds: Counter[str]) -> None:
    name = getattr(job, "__name__", str(job))
    while True:
        await asyncio.sleep(interval)
        try:
            await job()
        except ApiUnavailable:
            pass  # logged once per outage (lockstep.operator.outage); the next round tries again
        except Exception:  # a timer must survive one failed round
            logger.exception("Periodic job %s failed.", name)
        rounds[name] += 1


def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
