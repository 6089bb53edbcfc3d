"""The real operator (kopf, report endpoint, webhook server) on its own thread and event loop, against any
API server: the kmock emulation or a real control plane. kopf cancels every task created after it started
when it stops, so it gets a loop of its own (the demo's, or pytest-asyncio's, lives on)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kmock

from lockstep.operator.app import LockstepOperator
from lockstep.operator.config import OperatorConfig

__all__ = ["RunningOperator", "emulator_connection", "run_operator", "run_operator_thread", "wait_until",
           "wait_watches"]

T = TypeVar("T")


async def wait_until(condition: Callable[[], T], timeout: float, what: str, *, interval: float = 0.02) -> T:
    """Poll ``condition`` until it returns a truthy value, and return that value; raise TimeoutError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)


@dataclass
class RunningOperator:
    operator: LockstepOperator
    thread: threading.Thread
    stop: threading.Event

    @property
    def report_port(self) -> int:
        assert self.operator.report_server is not None and self.operator.report_server.port
        return self.operator.report_server.port

    @property
    def metrics_port(self) -> int:
        assert self.operator.metrics_port
        return self.operator.metrics_port


@contextlib.asynccontextmanager
async def run_operator_thread(connection: Any, config: OperatorConfig) -> AsyncIterator[RunningOperator]:
    """The operator on its own thread until the block exits; entered once its report endpoint listens."""
    operator = LockstepOperator(config, connection=connection)
    stop, ready, failure = threading.Event(), threading.Event(), []

    def main() -> None:
        try:
            asyncio.run(operator.run(stop_flag=stop, ready_flag=ready))
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's loop
            failure.append(error)
            ready.set()

    thread = threading.Thread(target=main, name="lockstep-operator", daemon=True)
    thread.start()
    try:
        await asyncio.to_thread(ready.wait, 20)
        await wait_until(lambda: failure or (operator.report_server is not None and operator.report_server.port),
                         20, "the operator's report endpoint")
        if failure:
            raise failure[0]
        yield RunningOperator(operator, thread, stop)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 20)


async def wait_watches(emulator: Any, count: int, timeout: float = 10.0) -> None:
    """kmock ignores resourceVersion: every new watch replays all objects as ADDED. Wait until the
    operator's watches are open before relying on what it has seen."""
    await wait_until(lambda: len(emulator[kmock.action.WATCH]) >= count, timeout, f"{count} watches")


@contextlib.asynccontextmanager
async def run_operator(emulator: Any, config: OperatorConfig) -> AsyncIterator[RunningOperator]:
    """The operator against the kmock emulation, entered once it watches pods and MCPServerInterfaces."""
    watches_before = len(emulator[kmock.action.WATCH])
    async with run_operator_thread(emulator_connection(emulator), config) as running:
        await wait_watches(emulator, watches_before + 2)
        yield running


def emulator_connection(emulator: Any) -> Any:
    import kopf

    # kopf scans namespaces at start unless told not to: kmock 0.8 answers any /api/v1/namespaces
    # URL with a 500 (a URL-parser bug), so the operator runs cluster-wide and never lists namespaces.
    return kopf.ConnectionInfo(server=str(emulator.url).rstrip("/"), insecure=True, default_namespace="default")
