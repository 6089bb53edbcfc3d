"""The sidecar process: the probe loop, the reporter and the health server, together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from lockstep import reader
from lockstep.core.gate import ComponentGate
from lockstep.core.ignore import IgnoreRules
from lockstep.core.report import Observation
from lockstep.proxy.app import ProxyApp
from lockstep.proxy.metrics import ProxyMetrics
from lockstep.proxy.policy import Finding, Mode
from lockstep.proxy.serving import serve_proxy
from lockstep.sidecar.health import HealthServer
from lockstep.sidecar.metrics import SidecarMetrics
from lockstep.sidecar.prober import Prober
from lockstep.sidecar.proxy import WithheldLog
from lockstep.sidecar.reporter import Delivery, Reporter
from lockstep.sidecar.settings import SidecarSettings
from lockstep.sidecar.verdict import VerdictKeeper, default_stale_after
from lockstep.sidecar.verdict_watch import VerdictWatcher

__all__ = ["RunningSidecar", "run_sidecar", "running_sidecar"]

logger = logging.getLogger("lockstep.sidecar")

REPORT_TIMEOUT = 10.0
#: Seconds from the first withheld component to the report that tells the operator.
WITHHELD_REPORT_DELAY = 1.0
SHUTDOWN_TIMEOUT = 3.0


@dataclass
class RunningSidecar:
    prober: Prober
    reporter: Reporter
    health: HealthServer
    metrics: SidecarMetrics
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    #: Enforcement Isolate and Quarantine: the in-line proxy in front of the MCP server, held to the operator's
    #: verdict by the keeper, which the reports' answers and the verdict watch feed.
    proxy: ProxyApp | None = None
    keeper: VerdictKeeper | None = None
    watcher: VerdictWatcher | None = None

    def healthy(self) -> bool:
        return _alive(self.tasks)


def _alive(tasks: list[asyncio.Task[None]]) -> bool:
    return bool(tasks) and not any(task.done() for task in tasks)


@contextlib.asynccontextmanager
async def running_sidecar(settings: SidecarSettings, *, host: str = "0.0.0.0",
                          on_delivered: Callable[[Delivery], None] | None = None,
                          connect: Callable[..., Any] = reader.connect,
                          max_report_backoff: float = 30.0,
                          clock: Callable[[], float] = time.monotonic) -> AsyncIterator[RunningSidecar]:
    """Run a sidecar in the current event loop until the block exits. ``host``: the proxy's and the health
    server's listen address (a wildcard: both address families, see serve_proxy); ``clock``: the monotonic
    seconds the staleAfter deadline is kept in."""
    metrics = SidecarMetrics()
    timeout = httpx2.Timeout(REPORT_TIMEOUT)
    withheld = WithheldLog() if settings.proxy_port is not None else None
    keeper: VerdictKeeper | None = None

    def delivered(delivery: Delivery) -> None:
        if keeper is not None:
            keeper.delivered(delivery)
        if on_delivered is not None:
            on_delivered(delivery)

    def found(finding: Finding) -> None:
        assert withheld is not None
        if withheld.add(finding):
            # Report soon (the last observation again, once one was delivered): the operator records it.
            asyncio.get_running_loop().call_later(WITHHELD_REPORT_DELAY, reporter.resubmit)

    async with httpx2.AsyncClient(verify=settings.ssl_context(), timeout=timeout, trust_env=False) as client:
        reporter = Reporter(settings.report_url, settings.token_path, client, metrics,
                            max_backoff=max_report_backoff, on_delivered=delivered, withheld=withheld)
        proxy, watcher = None, None

        def probed(observation: Observation) -> None:
            if proxy is not None and observation.interface is not None:
                proxy.policy.observed(observation.interface)  # calls are decided per pod, probe included (S6-8)
            reporter.submit(observation)

        prober = Prober(settings, probed, metrics, connect=connect)
        if settings.proxy_port is not None:
            proxy = _proxy(settings, found, metrics)
            keeper = VerdictKeeper(proxy, isolating=settings.proxy_mode == "isolate",
                                   stale_after=default_stale_after(settings.interval), clock=clock)
            watcher = VerdictWatcher(settings.operator_url, reporter.read_token, client, keeper,
                                     max_backoff=max_report_backoff)
        tasks: list[asyncio.Task[None]] = []
        health = HealthServer(metrics.registry, lambda: _alive(tasks), host=host, port=settings.port)
        sidecar = RunningSidecar(prober, reporter, health, metrics, tasks, proxy, keeper, watcher)
        # The proxy first: a port it cannot have on either family fails the sidecar before anything is served.
        proxy_runner = await serve_proxy(proxy, host, settings.proxy_port) if proxy and settings.proxy_port else None
        try:
            await health.start()
        except BaseException:
            if proxy_runner is not None:
                await proxy_runner.cleanup()
            raise
        tasks += [asyncio.create_task(reporter.run(), name="lockstep-reporter"),
                  asyncio.create_task(prober.run(), name="lockstep-prober")]
        if keeper is not None and watcher is not None:
            tasks += [asyncio.create_task(keeper.watch_deadline(), name="lockstep-verdict-deadline"),
                      asyncio.create_task(watcher.run(), name="lockstep-verdict-watch")]
        try:
            yield sidecar
        finally:
            for task in sidecar.tasks:
                task.cancel()
            # Bounded: closing the MCP session politely must not hold the pod's termination.
            await asyncio.wait(sidecar.tasks, timeout=SHUTDOWN_TIMEOUT)
            if proxy_runner is not None:
                await proxy_runner.cleanup()
            await sidecar.health.stop()


def _proxy(settings: SidecarSettings, found: Callable[[Finding], None], metrics: SidecarMetrics) -> ProxyApp:
    """The in-line proxy. Its gate is empty until the operator answers the first report: everything is
    withheld (fail closed). In enforcement Isolate an answer carrying a component not approved is refused
    whole (block), and every request is refused until the operator's verdict is True (lockstep.sidecar.verdict)."""
    return ProxyApp(settings.mcp_url, ComponentGate({}, IgnoreRules()),
                    Mode.BLOCK if settings.proxy_mode == "isolate" else Mode.QUARANTINE, on_finding=found,
                    metrics=ProxyMetrics(metrics.registry))


async def run_sidecar(settings: SidecarSettings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (SIGTERM)."""
    logger.info("Lockstep sidecar: probing %s (%s) every %gs, reporting to %s%s",
                settings.mcp_url, settings.transport, settings.interval, settings.report_url,
                f"; in-line proxy ({settings.proxy_mode}) on port {settings.proxy_port}" if settings.proxy_port else "")
    async with running_sidecar(settings):
        await stop.wait()


async def idle(port: int, stop: asyncio.Event) -> None:
    """Serve /healthz and /metrics only: the settings are unusable, so nothing is probed or reported."""
    metrics = SidecarMetrics()
    health = HealthServer(metrics.registry, lambda: True, port=port)
    await health.start()
    try:
        await stop.wait()
    finally:
        await health.stop()
