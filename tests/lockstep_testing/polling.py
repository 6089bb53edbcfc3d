"""Waiting for something to become true: the one polling helper of the suite, async and sync.

A positive wait only: the timeout is a guard that fails the test, not a timing check, so it can be
generous (it costs nothing when things work). A check that something does *not* happen waits on a
positive signal that the system moved past the point where it would have happened, never on a sleep.
``what`` names the awaited thing in the failure; without it the condition's own source line is named.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

from lockstep.demo.operator_thread import wait_until

__all__ = ["eventually", "eventually_sync"]

T = TypeVar("T")


async def eventually(condition: Callable[[], T], timeout: float = 15.0, what: str | None = None, *,
                     interval: float = 0.02) -> T:
    """Poll ``condition`` until it returns a truthy value, and return that value; fail the test after
    ``timeout`` seconds (the product's poll, lockstep.demo.operator_thread.wait_until, as a test failure)."""
    try:
        return await wait_until(condition, timeout, what or "", interval=interval)
    except TimeoutError:  # the condition's source is read only now, on a failure
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what or _described(condition)}") from None


def eventually_sync(condition: Callable[[], T], timeout: float = 30.0, what: str | None = None, *,
                    interval: float = 0.1) -> T:
    """:func:`eventually` for code that runs outside an event loop (a thread, a plain test)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or _described(condition)}")
        time.sleep(interval)


def _described(condition: Callable[[], Any]) -> str:
    try:
        source = " ".join(line.strip() for line in inspect.getsource(condition).splitlines())
    except (OSError, TypeError):
        return getattr(condition, "__qualname__", repr(condition))
    return source[:300]
