"""What the proxy's listener spends on a connection before it has a request: open connections per source
address, and a deadline for the first request's headers (aiohttp's keep-alive timer bounds the headers of
later requests on the same connection: it closes a connection whose next request is not whole in time).
Installed on aiohttp's ``web.Server``, whose connection_made/connection_lost every connection goes through.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["DEFAULT_CONNECTIONS_PER_SOURCE", "DEFAULT_HEADER_TIMEOUT", "ConnectionGuard"]

#: Agents reach the proxy through a Service: one source is one agent pod (or one node, behind SNAT).
DEFAULT_CONNECTIONS_PER_SOURCE = 256
DEFAULT_HEADER_TIMEOUT = 10.0


@dataclass
class _Connection:
    source: str
    transport: asyncio.Transport
    deadline: asyncio.TimerHandle | None = None


class ConnectionGuard:
    """At most ``per_source`` open connections from one address, each cut if its first request's headers are
    not whole within ``header_timeout`` seconds (0 turns either off)."""

    def __init__(self, per_source: int = DEFAULT_CONNECTIONS_PER_SOURCE,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> None:
        self.per_source, self.header_timeout = per_source, header_timeout
        self._open: dict[str, int] = {}
        self._connections: dict[int, _Connection] = {}  # by id(handler)
        self._by_transport: dict[int, _Connection] = {}  # by id(transport): a request knows its transport
        self.refused = 0
        self.timed_out = 0

    def install(self, server: web.Server) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._made(handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._lost(handler)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def headers_arrived(self, transport: asyncio.BaseTransport | None) -> None:
        """A request's headers are whole on ``transport``: its header deadline is met."""
        connection = self._by_transport.get(id(transport)) if transport is not None else None
        if connection is not None and connection.deadline is not None:
            connection.deadline.cancel()
            connection.deadline = None

    def open_from(self, source: str) -> int:
        return self._open.get(source, 0)

    def _made(self, handler: Any, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        if self.per_source and self._open.get(source, 0) >= self.per_source:
            self.refused += 1
            transport.abort()
            return
        self._open[source] = self._open.get(source, 0) + 1
        connection = _Connection(source, transport)
        if self.header_timeout > 0:
            connection.deadline = asyncio.get_running_loop().call_later(self.header_timeout, self._late, connection)
        self._connections[id(handler)] = self._by_transport[id(transport)] = connection

    def _late(self, connection: _Connection) -> None:
        connection.deadline = None
        self.timed_out += 1
        connection.transport.abort()

    def _lost(self, handler: Any) -> None:
        connection = self._connections.pop(id(handler), None)
        if connection is None:
            return
        self._by_transport.pop(id(connection.transport), None)
        if connection.deadline is not None:
            connection.deadline.cancel()
        left = self._open.get(connection.source, 1) - 1
        if left > 0:
            self._open[connection.source] = left
        else:
            self._open.pop(connection.source, None)
