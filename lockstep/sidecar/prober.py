"""The probe loop: measure the MCP server at start, on a timer and on every list_changed.

One MCP session stays open so that ``notifications/*/list_changed`` reach the
sidecar; each probe re-reads every list on that session (no new handshake, so
a rug pull announced by the server is measured within milliseconds). When the
session drops, the sidecar reconnects at once and probes again; while the
server cannot be reached it retries with capped backoff.

Failures are observations too: an unreachable server or an invalid interface
is reported, so the operator marks the pod not verified instead of seeing
silence. Before the server has answered once, failures are kept quiet for a
grace period (one probe interval) while the application starts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockstep.sidecar.exposure import Exposure, ExposureWatch
from lockstep.sidecar.listener import loopback_port, sleep_until_listening, wait_until_closed
from lockstep.sidecar.metrics import SidecarMetrics
from lockstep.sidecar.settings import SidecarSettings

from lockstep import reader
from lockstep.core import InterfaceError
from lockstep.core.report import FailureReason, Observation

__all__ = ["Prober"]

logger = logging.getLogger("lockstep.sidecar")

UNREACHABLE_ERRORS = (reader.ServerUnreachableError, reader.ReadTimeoutError)
MIN_RETRY = 0.1
MAX_RETRY = 5.0
MIN_PROBE_GAP = 0.1  # seconds between the starts of two probes woken by list_changed
#: More list_changed notifications than this in one second is a flood: each costs the SDK a parse, so
#: the sidecar probes once more, closes the session and reconnects after a backoff (1 s, doubling up to
#: the probe interval or FLOOD_BACKOFF_MAX), which bounds its CPU whatever the server sends.
FLOOD_LIMIT = 100
FLOOD_BACKOFF_MAX = 60.0


class Prober:
    def __init__(self, settings: SidecarSettings, submit: Callable[[Observation], None],
                 metrics: SidecarMetrics, *, connect: Callable[..., Any] = reader.connect,
                 proc: Path = Path("/proc")) -> None:
        self._settings, self._submit, self._metrics, self._connect = settings, submit, metrics, connect
        self._list_changed = asyncio.Event()
        self._started = time.monotonic()
        self._ever_connected = False
        self._last_failure: tuple[FailureReason, float] | None = None
        self.last_observation: Observation | None = None
        self._flooded = asyncio.Event()
        self._window: tuple[float, int] = (0.0, 0)  # start of the current second, notifications in it
        self._flood_backoff = 1.0
        #: In a pod (its IP known): the socket tables, checked on their own timer; a change is reported at once.
        self.exposure = _exposure_watch(settings, self._exposure_changed, proc)

    async def run(self) -> None:
        """Probe (and, in a pod, watch the socket tables) until cancelled; never raises."""
        if self.exposure is None:
            await self._probe_loop()
            return
        watch = asyncio.create_task(self.exposure.run(), name="lockstep-exposure")
        try:
            await self._probe_loop()
        finally:
            watch.cancel()

    def _exposure_changed(self, exposure: Exposure) -> None:
        """Report the last observation again with the new finding (before the first probe, it waits for it)."""
        if self.last_observation is not None:
            self._report(_with_exposure(self.last_observation, exposure))

    async def _probe_loop(self) -> None:
        retry = MIN_RETRY
        while True:
            opened = time.monotonic()
            try:
                if await self._session() == "flooded":
                    await asyncio.sleep(self._flood_backoff)
                    self._flood_backoff = min(self._flood_backoff * 2, FLOOD_BACKOFF_MAX, self._settings.interval)
                    continue
                self._flood_backoff = 1.0
                if time.monotonic() - opened > MAX_RETRY:
                    retry = MIN_RETRY  # a session that lived a while dropped: reconnect at once
                    continue
                # one that drops as soon as it opens is retried with backoff, not in a tight loop
            except reader.ReaderError as error:
                self._failed(_failure_reason(error), str(error), scheduled=False)
            except InterfaceError as error:  # defensive: the reader raises these from read() only
                self._failed(FailureReason.INTERFACE_INVALID, str(error), scheduled=False)
            except Exception:  # never let the sidecar die: log and try again
                logger.exception("Unexpected error in the probe loop")
            # The backoff bounds the retries of a server that refuses or fails; one that is not listening
            # yet (the application starts after its sidecar) is connected to as soon as it listens.
            await sleep_until_listening(loopback_port(self._settings.mcp_url), retry)
            retry = min(retry * 2, MAX_RETRY, self._settings.interval)

    async def _session(self) -> str:
        """One session until it drops ("dropped") or floods ("flooded")."""
        settings = self._settings
        self._flooded.clear()
        async with self._connect(settings.mcp_url, transport=settings.transport, headers=settings.mcp_headers(),
                                 timeout=settings.timeout, on_list_changed=self._on_list_changed,
                                 client_capabilities=settings.client_capabilities) as live:
            if not self._ever_connected:
                logger.info("Connected to the MCP server at %s", settings.mcp_url)
            self._ever_connected = True
            trigger = "connect"
            while True:
                self._list_changed.clear()
                started = time.monotonic()
                await self._probe(live, trigger)
                trigger = await self._wait(live)
                if trigger == "dropped":
                    logger.info("The MCP session dropped; reconnecting")
                    return trigger
                if trigger == "server_closed":
                    logger.info("The MCP server stopped listening (shutting down?): session closed")
                    return "dropped"
                if trigger == "flooded":
                    self._metrics.floods.inc()
                    logger.warning("More than %d list_changed notifications a second: one more probe, then the "
                                   "session is closed for %gs", FLOOD_LIMIT, self._flood_backoff)
                    await self._probe(live, "list_changed")
                    return trigger
                if trigger == "list_changed":  # a server that floods notifications gets 10 reads a second
                    await asyncio.sleep(max(0.0, started + MIN_PROBE_GAP - time.monotonic()))

    async def _probe(self, live: Any, trigger: str) -> None:
        started = time.monotonic()
        try:
            result = await live.read()
        except UNREACHABLE_ERRORS:
            raise  # the session is gone: reconnect, and report if that fails too
        except (reader.ReaderError, InterfaceError) as error:
            self._metrics.probe_duration.observe(time.monotonic() - started)
            self._failed(FailureReason.INTERFACE_INVALID, str(error), scheduled=True)
            return
        self._metrics.probe_duration.observe(time.monotonic() - started)
        self._metrics.probes.labels("ok").inc()
        self._metrics.last_success.set(time.time())
        observation = Observation.of_interface(result.interface, _now())
        if observation.digest is not None:
            self._metrics.observe_interface(observation.digest)
        self._last_failure = None
        if self.exposure is not None and self.last_observation is None:
            # The first report carries a check made after the server answered: a server that listens past the
            # proxy from its start is never verified, not even until the watch's next tick.
            await self.exposure.refresh()
        self._report(observation)
        logger.info("Probe (%s): %s", trigger, observation.digest.digest if observation.digest else "?")

    async def _wait(self, live: Any) -> str:
        """Wait for the next probe; returns what woke us: ``timer``, ``list_changed``, ``dropped``,
        ``flooded`` or ``server_closed`` (the server beside us stopped listening: let it exit)."""
        interval = self._settings.interval
        delay = interval * random.uniform(0.8, 1.0)  # jitter: pods started together drift apart
        changed = asyncio.ensure_future(self._list_changed.wait())
        dropped = asyncio.ensure_future(live.wait_dropped())
        flooded = asyncio.ensure_future(self._flooded.wait())
        waits = {changed, dropped, flooded}
        port = loopback_port(self._settings.mcp_url)
        closed = asyncio.ensure_future(wait_until_closed(port)) if port is not None else None
        if closed is not None:
            waits.add(closed)
        try:
            done, _ = await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if dropped in done:
            return "dropped"
        if closed in done:
            return "server_closed"
        if flooded in done:
            return "flooded"
        return "list_changed" if changed in done else "timer"

    def _on_list_changed(self, kind: str) -> None:
        """Per notification: O(1), no I/O (a log line only when it wakes a probe)."""
        self._metrics.list_changed.inc()
        now = time.monotonic()
        start, count = self._window
        self._window = (start, count + 1) if now - start < 1.0 else (now, 1)
        if self._window[1] > FLOOD_LIMIT:
            self._flooded.set()
        if not self._list_changed.is_set():
            logger.info("notifications/%s/list_changed received", kind)
            self._list_changed.set()

    def _failed(self, reason: FailureReason, message: str, *, scheduled: bool) -> None:
        """Count a failed probe; report it if the operator should know now."""
        self._metrics.probes.labels("unreachable" if reason is FailureReason.SERVER_UNREACHABLE else "invalid").inc()
        now = time.monotonic()
        if not self._ever_connected and now - self._started < self._settings.interval:
            logger.info("Waiting for the MCP server: %s", message)
            return
        repeated = self._last_failure is not None and self._last_failure[0] is reason
        if not scheduled and repeated and now - self._last_failure[1] < self._settings.interval:  # type: ignore[index]
            return  # retries between probes report a failure once per interval, not every few seconds
        logger.warning("Probe failed (%s): %s", reason.value, message)
        self._last_failure = (reason, now)
        self._report(Observation.of_failure(reason, message, _now()))

    def _report(self, observation: Observation) -> None:
        """Every observation carries the socket tables' latest finding (a failure too: it is judged the same)."""
        if self.exposure is not None:
            observation = _with_exposure(observation, self.exposure.current)
        self.last_observation = observation
        self._submit(observation)


def _exposure_watch(settings: SidecarSettings, on_change: Callable[[Exposure], None],
                    proc: Path) -> ExposureWatch | None:
    if not settings.pod_ip:
        return None
    if ipaddress.ip_address(settings.pod_ip).is_loopback:  # a host-loopback stand-in: see lockstep.sidecar.exposure
        return ExposureWatch(on_change, stand_in=(settings.pod_ip, loopback_port(settings.mcp_url) or 0))
    return ExposureWatch(on_change, proc=proc)


def _with_exposure(observation: Observation, exposure: Exposure) -> Observation:
    return observation.exposed(exposure.exposed, exposure.address, exposure.sockets)


def _failure_reason(error: reader.ReaderError) -> FailureReason:
    if isinstance(error, UNREACHABLE_ERRORS):
        return FailureReason.SERVER_UNREACHABLE
    return FailureReason.INTERFACE_INVALID


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
