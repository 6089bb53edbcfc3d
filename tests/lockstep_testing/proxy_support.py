"""``lockstep proxy`` in-process in front of a test server, and agents that talk through it.

:func:`running_proxy` serves the product's :class:`ProxyApp` on a free loopback port;
:func:`agent_read` is an agent: the ``mcp`` SDK's ``ClientSession`` with the client name
and User-Agent it claims, over either transport and either protocol era, keeping every
byte it received so a test can say that a poisoned text never reached it::

    async with serve_mcp(server) as upstream, running_proxy(upstream, approved) as proxy:
        seen = await agent_read(proxy.url, client_name="claude-code")
        assert "<IMPORTANT>" not in seen.raw
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from lockstep.core.gate import ComponentGate
from lockstep.core.model import Interface
from lockstep.core.revision import Revision
from lockstep.proxy.app import ProxyApp
from lockstep.proxy.policy import Finding, Mode
from lockstep.proxy.serving import serve_proxy

__all__ = ["AgentView", "ProxyHandle", "agent_read", "running_proxy"]


@dataclass
class ProxyHandle:
    url: str
    app: ProxyApp
    findings: list[Finding] = field(default_factory=list)


@contextlib.asynccontextmanager
async def running_proxy(upstream: str, approved: Iterable[Interface], mode: str = "quarantine",
                        ignore: Iterable[str] = (), **options: Any) -> AsyncIterator[ProxyHandle]:
    """The proxy on 127.0.0.1 (a free port) in front of ``upstream``; its URL has the upstream's path."""
    findings: list[Finding] = []
    gate = ComponentGate.of([Revision.of(interface, list(ignore)) for interface in approved], list(ignore))
    app = ProxyApp(upstream, gate, Mode(mode), on_finding=findings.append, **options)
    runner = await serve_proxy(app, "127.0.0.1", 0, shutdown_timeout=0.5)
    try:
        host, port = runner.addresses[0][:2]
        yield ProxyHandle(f"http://{host}:{port}{urlsplit(upstream).path}", app, findings)
    finally:
        await runner.cleanup()


@dataclass
class AgentView:
    """What one agent got: the SDK's parsed lists, the call outcome, and every raw byte received."""

    protocol_version: str
    instructions: str | None
    tools: list[types.Tool]
    raw: str
    call_error: MCPError | None = None
    call_result: Any = None


class _Recording(httpx2.AsyncBaseTransport):
    def __init__(self, received: list[bytes]) -> None:
        self._inner, self._received = httpx2.AsyncHTTPTransport(), received

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        inner, received = response.stream, self._received

        class Recorded(httpx2.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in inner:  # type: ignore[union-attr]
                    received.append(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await inner.aclose()  # type: ignore[union-attr]

        response.stream = Recorded()
        return response


async def agent_read(url: str, *, client_name: str = "agent", user_agent: str = "agent/1.0",
                     authorization: str | None = None, transport: str = "streamable-http",
                     modern: bool = True, call: str | None = None, list_tools: bool = True) -> AgentView:
    """Connect as an agent, list the tools (every page, as the SDK does; not with ``list_tools=False``: an agent
    that calls a tool it learnt of earlier), optionally call one.

    A failure is raised as itself (the first error inside the SDK's task groups)."""
    try:
        return await _agent_read(url, client_name, user_agent, authorization, transport, modern, call, list_tools)
    except BaseExceptionGroup as group:
        raise _first_leaf(group) from None


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def _agent_read(url: str, client_name: str, user_agent: str, authorization: str | None, transport: str,
                      modern: bool, call: str | None, list_tools: bool = True) -> AgentView:
    received: list[bytes] = []
    headers = {"User-Agent": user_agent}
    if authorization:
        headers["Authorization"] = authorization
    recording = _Recording(received)

    def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=None), auth=auth,
                                  transport=recording)

    async with contextlib.AsyncExitStack() as stack:
        if transport == "sse":
            streams = sse_client(url, headers=headers, httpx_client_factory=factory)
        else:
            client = await stack.enter_async_context(factory(headers=headers))
            streams = streamable_http_client(url, http_client=client)
        read, write = await stack.enter_async_context(streams)
        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=types.Implementation(name=client_name, version="1.0")))
        if modern:
            discovered = await session.discover()
            instructions = discovered.instructions
        else:
            initialized = await session.initialize()
            instructions = initialized.instructions
        tools: list[types.Tool] = []
        cursor = None
        while list_tools:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        view = AgentView(session.protocol_version or "", instructions, tools, "")
        if call is not None:
            try:
                view.call_result = await session.call_tool(call, {"city": "Paris"})
            except MCPError as error:
                view.call_error = error
    view.raw = b"".join(received).decode("utf-8", "replace")
    return view
