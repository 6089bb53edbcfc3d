"""The HTTP side of relaying one answer, apart from judging it: the upstream answer being relayed (cut when the
pod is isolated), the isolation reason agents are shown, and the plain helpers that copy, read and answer."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from lockstep.proxy.exchange import Exchange

__all__ = ["HOP_BY_HOP", "RESPONSE_DROPPED", "Isolated", "Live", "closing", "copy_headers", "isolation_reason",
           "jsonrpc_response", "read_body", "read_limited", "response_like"]

#: Request headers that belong to one connection, not to the message (RFC 9110 7.6.1), and the
#: ones aiohttp computes for the body it sends.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length"})
RESPONSE_DROPPED = HOP_BY_HOP | {"content-encoding"}
#: The reason shown to agents: a word of the operator's reason vocabulary (``InterfaceChanged``), never text
#: the server chose (a verdict message names drift findings by the server's tool names).
_REASON = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")


class Isolated(Exception):
    """The pod was isolated while an answer was being relayed: nothing more of it goes out."""


@dataclass(eq=False)
class Live:
    """An upstream answer being relayed: cut when the pod is isolated."""

    request: web.Request
    upstream: aiohttp.ClientResponse
    exchange: Exchange
    response: web.StreamResponse | None = None

    def cut(self) -> None:
        """Close the upstream side: a relay waiting for the server's next bytes wakes up at once."""
        self.upstream.close()

    def abort(self) -> None:
        """Cut the client's connection (what it has not received yet never reaches it)."""
        transport = self.request.transport
        if transport is not None:
            transport.abort()


def isolation_reason(reason: str) -> str:
    """``reason`` as agents are shown it: its first word when that is a plain identifier, else "NotVerified"."""
    head = reason.split(":", 1)[0].strip()
    return head if _REASON.fullmatch(head) else "NotVerified"


async def read_body(request: web.Request, timeout: float) -> bytes:
    """The request body (up to the app's limit), within ``timeout`` seconds (TimeoutError)."""
    if request.content.is_eof():  # all here already: no deadline to arm
        return await request.read()
    async with asyncio.timeout(timeout):
        return await request.read()


def closing(response: web.Response) -> web.Response:
    response.force_close()  # a body the proxy did not read (whole) must not be taken for the next request
    return response


async def read_limited(upstream: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The body, and whether it is complete (False: the first ``limit``-plus bytes only)."""
    chunks, size = [], 0
    async for chunk in upstream.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), False
    return b"".join(chunks), True


def response_like(upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    copy_headers(upstream, response)
    return response


def copy_headers(upstream: aiohttp.ClientResponse, response: web.StreamResponse,
                  dropped: frozenset[str] = RESPONSE_DROPPED) -> None:
    for name, value in upstream.headers.items():
        if name.lower() not in dropped:
            response.headers.add(name, value)


def jsonrpc_response(message: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(message).encode(), content_type="application/json")
