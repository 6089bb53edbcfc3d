"""``/healthz`` and ``/metrics`` on the sidecar's own port.

A few lines of asyncio instead of a web framework: the sidecar runs in every MCP
server pod, so it must stay small. HTTP/1.0 semantics, one request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from lockstep.core.wire import DEFAULT_SIDECAR_PORT

__all__ = ["HealthServer"]

REQUEST_TIMEOUT = 5.0
MAX_HEAD = 8192


class HealthServer:
    def __init__(self, registry: CollectorRegistry, healthy: Callable[[], bool], *,
                 host: str = "0.0.0.0", port: int = DEFAULT_SIDECAR_PORT) -> None:
        self._registry, self._healthy, self._host, self._port = registry, healthy, host, port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            method, _, rest = head[:MAX_HEAD].decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            status, content_type, body = self._respond(method, path)
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _respond(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"method not allowed\n"
        if path == "/healthz":
            if self._healthy():
                return "200 OK", "text/plain", b"ok\n"
            return "503 Service Unavailable", "text/plain", b"the probe loop has stopped\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self._registry)
        return "404 Not Found", "text/plain", b"not found\n"
