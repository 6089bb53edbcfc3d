"""The sidecar process: the probe loop, the reporter and the health server, together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lockstep.sidecar.health import HealthServer
from lockstep.sidecar.metrics import SidecarMetrics
from lockstep.sidecar.prober import Prober
from lockstep.sidecar.proxy import WithheldLog
from lockstep.sidecar.reporter import Delivery, Reporter
from lockstep.sidecar.settings import SidecarSettings

from lockstep import reader
from lockstep.core.gate import ComponentGate
from lockstep.core.ignore import IgnoreRules
from lockstep.proxy.app import ProxyApp, serve_proxy
from lockstep.proxy.metrics import ProxyMetrics
from lockstep.proxy.policy import Finding, Mode

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
    #: Enforcement Isolate and Quarantine: the in-line proxy in front of the MCP server.
    proxy: ProxyApp | None = None

    def healthy(self) -> bool:
        return _alive(self.tasks)


def _alive(tasks: list[asyncio.Task[None]]) -> bool:
    return bool(tasks) and not any(task.done() for task in tasks)


@contextlib.asynccontextmanager
async def running_sidecar(settings: SidecarSettings, *, host: str = "0.0.0.0",
                          on_delivered: Callable[[Delivery], None] | None = None,
                          connect: Callable[..., Any] = reader.connect,
                          max_report_backoff: float = 30.0) -> AsyncIterator[RunningSidecar]:
    """Run a sidecar in the current event loop until the block exits."""
    metrics = SidecarMetrics()
    timeout = httpx2.Timeout(REPORT_TIMEOUT)
    withheld = WithheldLog() if settings.proxy_port is not None else None
    proxy: ProxyApp | None = None
    isolating = settings.proxy_mode == "isolate"

    def delivered(delivery: Delivery) -> None:
        if proxy is not None and delivery.approved is not None:
            proxy.policy.gate = delivery.approved.gate()  # a malformed answer was refused whole: no approved
        if proxy is not None and isolating and delivery.verdict is not None:
            # Enforcement Isolate: the operator's verdict on this pod's last report decides, for every session.
            verdict = delivery.verdict
            was, proxy.isolated = proxy.isolated, (None if verdict.status == "True"
                                                   else f"{verdict.reason}: {verdict.message}"[:300])
            if (was is None) != (proxy.isolated is None):
                logger.warning("In-line proxy: %s", "every request refused, the pod is isolated (" + verdict.reason
                               + ")" if proxy.isolated else "requests pass again, the pod is verified")
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
        prober = Prober(settings, reporter.submit, metrics, connect=connect)
        if settings.proxy_port is not None:
            # Empty until the operator answers the first report: everything is withheld (fail closed). In
            # enforcement Isolate an answer carrying a component not approved is refused whole (block).
            proxy = ProxyApp(settings.mcp_url, ComponentGate({}, IgnoreRules()),
                             Mode.BLOCK if isolating else Mode.QUARANTINE, on_finding=found,
                             metrics=ProxyMetrics(metrics.registry))
        tasks: list[asyncio.Task[None]] = []
        health = HealthServer(metrics.registry, lambda: _alive(tasks), host=host, port=settings.port)
        sidecar = RunningSidecar(prober, reporter, health, metrics, tasks, proxy)
        await health.start()
        proxy_runner = await serve_proxy(proxy, host, settings.proxy_port) if proxy and settings.proxy_port else None
        tasks += [asyncio.create_task(reporter.run(), name="lockstep-reporter"),
                  asyncio.create_task(prober.run(), name="lockstep-prober")]
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
