"""How ``lockstep demo`` tells its story: each step stamped with the time since the start, a wait with a
progress dot a second that fails the demo when its step does not happen, and the real CLI run as its own
process with its output shown."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["LOCKSTEP", "DemoFailed", "Narrator", "run_cli"]

LOCKSTEP = [sys.executable, "-m", "lockstep.cli"]
STEP_TIMEOUT = 60.0


class DemoFailed(Exception):
    """A step did not happen as narrated."""


class Narrator:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def stamp(self) -> str:
        return f"[{time.monotonic() - self.started:6.2f}s]"

    def say(self, text: str) -> None:
        print(f"{self.stamp()} {text}", flush=True)

    def detail(self, text: str) -> None:
        for line in text.rstrip().splitlines():
            print(f"           {line}", flush=True)

    async def until(self, what: str, check: Callable[[], Any], timeout: float = STEP_TIMEOUT) -> Any:
        """Wait for ``check()`` to be truthy, with a progress dot every second; fail the demo on time-out."""
        print(f"{self.stamp()} … {what}", end="", flush=True)
        deadline, next_dot = time.monotonic() + timeout, time.monotonic() + 1
        while time.monotonic() < deadline:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                print(" ✓", flush=True)
                return value
            if time.monotonic() > next_dot:
                print(".", end="", flush=True)
                next_dot += 1
            await asyncio.sleep(0.02)
        print(" ✗", flush=True)
        raise DemoFailed(f"{what}: did not happen within {timeout:.0f}s")


async def run_cli(narrator: Narrator, *args: str, expect: int, show: int = 40) -> str:
    """Run the real CLI as its own process (the emulated API server answers on this event loop); show
    the first ``show`` lines of its output."""
    print(f"\n$ lockstep {' '.join(args)}", flush=True)
    process = await asyncio.create_subprocess_exec(*LOCKSTEP, *args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    result = subprocess.CompletedProcess(args, process.returncode or 0, stdout.decode(), stderr.decode())
    lines = (result.stdout + result.stderr).rstrip().splitlines()
    print("\n".join(lines[:show]), flush=True)
    if len(lines) > show:
        print(f"… ({len(lines) - show} more lines)", flush=True)
    print(f"(exit {result.returncode})\n", flush=True)
    if result.returncode != expect:
        raise DemoFailed(f"lockstep {args[0]} exited {result.returncode}, expected {expect}")
    return result.stdout

