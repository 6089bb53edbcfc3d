"""ServerExposed: does anything in the pod but the sidecar answer peers past the in-line proxy?

The sidecar reads its network namespace's socket tables (shared by every container of the pod) every
``interval`` seconds and compares them with its own sockets (``/proc/self/fd``): a listening TCP socket, a
bound UDP socket on an address that is not loopback, or any raw or packet socket that is not the sidecar's is
a path to agents that the proxy never sees (lockstep.core.socket_tables says what counts). Reading the tables
makes no connection, so a server cannot tell the check from an agent, nor filter it out.

A socket once seen stays in the finding for the life of the sidecar: a listener that opens for a moment can
hand a connection to an agent that outlives it, so a blinking listener is reported as a steady one.

A pod's IP is never a loopback address. A sidecar given one runs in one of the project's stand-ins for a node
(lockstep.demo's kubelet: every "pod" shares the host's network namespace, so its tables are the host's): there
it checks the one thing it can, whether the MCP server accepts a connection on that address (``stand_in``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lockstep.core.report import MAX_EXPOSED_SOCKETS
from lockstep.core.socket_tables import TABLES, ExposedSocket, SocketTableError, exposed_sockets

__all__ = ["CHECK_INTERVAL", "MAX_LISTED", "Exposure", "ExposureWatch", "own_socket_inodes", "read_tables"]

logger = logging.getLogger("lockstep.sidecar")

CHECK_INTERVAL = 0.5
#: Sockets named in a report (the first ones seen).
MAX_LISTED = MAX_EXPOSED_SOCKETS
SOCKET_LINK = "socket:["


@dataclass(frozen=True)
class Exposure:
    """The finding: ``exposed`` None when the tables could not be read (not checked)."""

    exposed: bool | None
    sockets: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        """The first address of an IP socket (``exposedAt``), or ""."""
        for described in self.sockets:
            _, _, address = described.partition(" ")
            if address:
                return address
        return ""


NOT_CHECKED = Exposure(None)


def read_tables(net: Path) -> dict[str, str]:
    """The socket tables under ``net`` (``/proc/net``) that exist; a kernel without one (no IPv6, no SCTP) leaves
    it out."""
    tables = {}
    for name in TABLES:
        try:
            tables[name] = (net / name).read_text()
        except FileNotFoundError:
            continue
    return tables


def own_socket_inodes(fd_dir: Path) -> frozenset[int]:
    """The inodes of this process's sockets (every thread shares the fd table)."""
    inodes = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return frozenset()
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:  # closed since the listing
            continue
        if target.startswith(SOCKET_LINK):
            inodes.add(int(target[len(SOCKET_LINK):-1]))
    return frozenset(inodes)


class ExposureWatch:
    """Checks the tables on a timer and calls ``on_change`` with the new Exposure whenever it changes."""

    def __init__(self, on_change: Callable[[Exposure], None], *, interval: float = CHECK_INTERVAL,
                 proc: Path = Path("/proc"), stand_in: tuple[str, int] | None = None) -> None:
        self._on_change, self._interval, self._stand_in = on_change, interval, stand_in
        self._net, self._fds = proc / "net", proc / "self" / "fd"
        self._seen: dict[tuple[str, str, int], ExposedSocket] = {}
        self.current = NOT_CHECKED

    def check(self) -> Exposure:
        """Read the tables once; the finding so far (sockets seen since start, in order)."""
        try:
            found = self._foreign()
        except (OSError, SocketTableError) as error:
            logger.warning("Cannot read the pod's socket tables (%s): ServerExposed is not checked", error)
            return self._update(NOT_CHECKED if not self._seen else self.current)
        return self._found(found)

    async def check_stand_in(self) -> Exposure:
        """On a host-loopback stand-in for a node: whether the MCP server accepts a connection on the pod's IP."""
        assert self._stand_in is not None
        host, port = self._stand_in
        accepted = await _accepts(host, port)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return self._found((ExposedSocket("tcp6" if ":" in host else "tcp", 0, address),) if accepted else ())

    def _found(self, found: tuple[ExposedSocket, ...]) -> Exposure:
        for socket in found:
            key = (socket.table, socket.address, socket.inode)
            if key not in self._seen:
                logger.warning("A socket of the pod answers peers past the in-line proxy: %s (the MCP server must "
                               "listen on 127.0.0.1 only, and no container may hold raw or packet sockets)",
                               socket.describe())
                self._seen[key] = socket
        described = tuple(dict.fromkeys(socket.describe() for socket in self._seen.values()))
        return self._update(Exposure(bool(described), described[:MAX_LISTED]))

    def _foreign(self) -> tuple[ExposedSocket, ...]:
        """Reachable sockets that are not ours. The tables are read before our fds and again after: a socket of
        ours opened in between is in the fds, and one closed in between is gone from the second read."""
        tables = read_tables(self._net)
        if not tables:
            raise FileNotFoundError(f"no socket table under {self._net}")
        candidates = exposed_sockets(tables, self._own())
        if not candidates:
            return ()
        again = {socket.inode for socket in exposed_sockets(read_tables(self._net), self._own())}
        return tuple(socket for socket in candidates if socket.inode in again)

    def _own(self) -> frozenset[int]:
        return own_socket_inodes(self._fds)

    def _update(self, exposure: Exposure) -> Exposure:
        if exposure != self.current:
            self.current = exposure
            self._on_change(exposure)
        return exposure

    async def refresh(self) -> Exposure:
        """Check now (the tables, or the stand-in's connect check); the finding so far. Never raises."""
        try:
            return self.check() if self._stand_in is None else await self.check_stand_in()
        except Exception:  # never let the watch die: the next tick tries again
            logger.exception("Unexpected error in the exposure check")
            return self.current

    async def run(self) -> None:
        """Check until cancelled; never raises."""
        while True:
            await self.refresh()
            # Jittered: a listener that opens between two reads cannot time itself to a fixed period.
            await asyncio.sleep(self._interval * random.uniform(0.5, 1.0))


async def _accepts(host: str, port: int, timeout: float = CHECK_INTERVAL) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
