"""A replica passes a report for a pod another replica owns on to that owner.

The report Service sends a report to any Ready replica. Only the owner of the pod's MCPServerInterface
judges it (lockstep.operator.replicas.membership), so another replica passes the request on as it came: the bearer
token and the body, to the address the owner published in the peering object, over HTTPS verified with
the operator's CA for the Service's name. The owner authenticates the token itself; the relay adds the
caller's address (RELAYED_FOR_HEADER), which the owner believes only from a live peer's address, for
its per-address limit. A relayed report is never relayed again: a replica that gets one for a pod it
does not own answers 503, and the sidecar retries. The owner's answer names its address (``reportTo``),
so the sidecar's next report skips this hop.
"""

from __future__ import annotations

import logging
import ssl
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from lockstep.core.names import REPORT_PATH
from lockstep.core.wire import ReplicaAddress

__all__ = ["RELAYED_FOR_HEADER", "RelayFailed", "ReportRelay"]

logger = logging.getLogger(__name__)

RELAYED_FOR_HEADER = "Lockstep-Relayed-For"
RELAY_TIMEOUT = aiohttp.ClientTimeout(total=15.0, connect=3.0)
_PASSED_ON = ("Authorization", "Content-Type")


class RelayFailed(Exception):
    """The owner could not be reached: the report is answered 503 and the sidecar sends it again."""


class ReportRelay:
    def __init__(self, *, report_url: str, ca_path: str | None, tls: bool) -> None:
        self._scheme = "https" if tls else "http"
        #: The name on the operator's serving certificate: the report Service's, as the sidecars use it.
        self._server_name = urlsplit(report_url).hostname if report_url else None
        self._context: ssl.SSLContext | None = None
        if tls:
            self._context = ssl.create_default_context(cafile=ca_path) if ca_path else ssl.create_default_context()
        self._session: aiohttp.ClientSession | None = None
        self.relayed = 0

    async def send(self, request: web.Request, body: bytes, endpoint: ReplicaAddress) -> web.Response:
        """Send the report to the owner at ``endpoint`` and answer with its answer."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=RELAY_TIMEOUT,
                                                  connector=aiohttp.TCPConnector(limit=64, ssl=self._context))
        headers = {name: request.headers[name] for name in _PASSED_ON if name in request.headers}
        headers[RELAYED_FOR_HEADER] = request.remote or "unknown"
        try:
            async with self._session.post(f"{self._scheme}://{endpoint}{REPORT_PATH}", data=body, headers=headers,
                                          server_hostname=self._server_name if self._context else None) as answer:
                content = await answer.read()
                relayed = {name: answer.headers[name] for name in ("Content-Type", "Retry-After")
                           if name in answer.headers}
                self.relayed += 1
                return web.Response(status=answer.status, body=content, headers=relayed)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise RelayFailed(f"the owner at {endpoint} could not be reached: {error}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
