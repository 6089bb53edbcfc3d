"""Noticing that the MCP server beside the sidecar has stopped listening (it is shutting down).

The sidecar keeps one MCP session open to the server for ``list_changed``. A server that is
told to stop (SIGTERM when its pod is deleted) closes its listening socket at once, then waits
for its open connections to finish: uvicorn waits without limit, so the sidecar's session would
hold the application until the kubelet kills it after the grace period (and a native sidecar is
only signalled after the application has exited). The sidecar watches the listening socket and
closes its session as soon as it is gone.

The watch reads the network namespace's socket table (``/proc/net/tcp`` and ``tcp6``, shared by
every container of a pod), so the server sees no extra connections; where that table cannot be
read, it falls back to a TCP connect every interval.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["is_listening", "loopback_port", "sleep_until_listening", "wait_until_closed"]

SOCKET_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TCP_LISTEN = "0A"  # the st column of a listening socket (include/net/tcp_states.h)
WATCH_INTERVAL = 0.25


def loopback_port(url: str) -> int | None:
    """The port of ``url`` if it names this pod (a loopback host), else None: only then can the
    sidecar tell that the server stopped listening."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None
    return parts.port or (443 if parts.scheme == "https" else 80)


def is_listening(port: int, tables: tuple[Path, ...] = SOCKET_TABLES) -> bool | None:
    """Whether a socket of this network namespace listens on TCP ``port``; None if no table is readable."""
    wanted = f":{port:04X}"
    readable = False
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(wanted) and fields[3] == TCP_LISTEN:
                return True
    return False if readable else None


async def _accepts(port: int, timeout: float = 1.0) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, family=socket.AF_INET),
                                           timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def wait_until_closed(port: int, interval: float = WATCH_INTERVAL,
                            tables: tuple[Path, ...] = SOCKET_TABLES) -> None:
    """Return once nothing listens on ``port`` (checked every ``interval`` seconds)."""
    while True:
        listening = is_listening(port, tables)
        if listening is None:
            listening = await _accepts(port)
        if not listening:
            return
        await asyncio.sleep(interval)


async def sleep_until_listening(port: int | None, seconds: float, interval: float = 0.1,
                                tables: tuple[Path, ...] = SOCKET_TABLES) -> None:
    """Sleep ``seconds``, or less: until a socket listens on ``port`` if none did when the sleep began.

    A pod's application starts after its native sidecar; the sidecar's retries back off, so without
    this a server that starts listening just after a retry waits for the next one (seconds of
    NotReady on every pod start). Reading the socket table is invisible to the server.
    """
    if port is None or is_listening(port, tables) is not False:
        await asyncio.sleep(seconds)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))
        if is_listening(port, tables):
            return
