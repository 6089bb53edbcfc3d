"""Reading: :func:`connect` and :func:`read_interface`, and the one boundary where the
SDK's and the HTTP library's errors become :class:`ReaderError` subclasses (:func:`_translate`)."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from lockstep.core.capabilities import DEFAULT_CLIENT_CAPABILITIES, parse_client_capabilities
from lockstep.core.errors import LockstepError
from lockstep.core.model import DEFAULT_LIMITS, Limits
from lockstep.reader._errors import ResponseTooLargeError, ServerUnreachableError, _one_line
from lockstep.reader._session import (
    _LIST_CHANGED_KINDS,
    ListChangedCallback,
    LiveSession,
    ReadResult,
    _call_safely,
    _capability_callbacks,
)
from lockstep.reader._transport import (
    SSE_CLIENT_EVENT_LIMIT,
    _http_status,
    _MeteredTransport,
    _TappedReadStream,
    _TappedWriteStream,
    _timed_out,
    _Wire,
    resolve_transport,
)

logger = logging.getLogger("lockstep.reader")

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_PAGES = 1000
#: ``auto`` (the default): the 2026-07-28 ``server/discover`` first, the ``initialize``
#: handshake (2025-06-18, 2025-11-25...) when the server does not answer it.
#: ``discover``: 2026-07-28 only. ``handshake``: ``initialize`` only.
PROTOCOLS = ("auto", "discover", "handshake")
DEFAULT_PROTOCOL = "auto"


@asynccontextmanager
async def connect(
    url: str,
    *,
    transport: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    limits: Limits = DEFAULT_LIMITS,
    on_list_changed: ListChangedCallback | None = None,
    max_pages: int = DEFAULT_MAX_PAGES,
    protocol: str = DEFAULT_PROTOCOL,
    client_capabilities: str | Iterable[str] = DEFAULT_CLIENT_CAPABILITIES,
) -> AsyncIterator[LiveSession]:
    """Open one initialized session to ``url``; ``timeout`` bounds the opening and each read.

    ``on_list_changed(kind)`` runs with ``"tools"``, ``"prompts"`` or ``"resources"`` for
    every list change the server sends; keep it short (set an event). In the handshake era
    they are ``notifications/<kind>/list_changed`` messages; in the 2026-07-28 era the
    reader opens ``subscriptions/listen`` for every list whose capability announces
    ``listChanged``, and the stream's end marks the session dropped. ``headers`` go on every HTTP
    request. ``client_capabilities``: what the probe announces (see :data:`CLIENT_CAPABILITIES`).
    When the connection fails, :meth:`LiveSession.read` (or the whole ``async with`` block)
    raises :class:`ServerUnreachableError` and :attr:`LiveSession.dropped` is set: open a new connection.
    """
    wire = _Wire(url, limits)
    options = _options(url, transport, protocol, headers, timeout, max_pages, on_list_changed, client_capabilities)
    async with _connect(wire, options) as live:
        yield live


@dataclass(frozen=True)
class _Options:
    transport: str
    protocol: str
    headers: dict[str, str]
    timeout: float
    max_pages: int
    on_list_changed: ListChangedCallback | None = None
    client_capabilities: tuple[str, ...] = DEFAULT_CLIENT_CAPABILITIES


@asynccontextmanager
async def _connect(wire: _Wire, options: _Options) -> AsyncIterator[LiveSession]:
    stage = "opening"
    try:
        # The scope wraps the session for its whole life (cancel scopes must nest with the
        # transports' task groups); its deadline only bounds the opening.
        with anyio.CancelScope(deadline=anyio.current_time() + options.timeout) as opening:
            async with AsyncExitStack() as stack:
                live = await _open(stack, wire, options)
                opening.deadline = math.inf
                stage = "open"
                try:
                    yield live
                except BaseException:
                    stage = "failed"
                    raise
                stage = "closing"
        if opening.cancelled_caught:
            raise _timed_out(wire, options.timeout)
    except BaseException as error:
        leaves = list(_leaves(error))
        if stage == "closing" and all(_is_closing_noise(leaf) for leaf in leaves):
            # The caller got what it wanted; a server gone by now is not its concern.
            logger.debug("closing the session to %s failed: %s", wire.url, _one_line(error))
            return
        translated = _translate(error, leaves, wire)
        if translated is error:
            raise
        raise translated from None


def _is_closing_noise(error: BaseException) -> bool:
    return isinstance(error, Exception) and not isinstance(error, LockstepError)


def _options(
    url: str,
    transport: str | None,
    protocol: str,
    headers: Mapping[str, str] | None,
    timeout: float,
    max_pages: int,
    on_list_changed: ListChangedCallback | None = None,
    client_capabilities: str | Iterable[str] = DEFAULT_CLIENT_CAPABILITIES,
) -> _Options:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    if timeout <= 0 or max_pages < 1:
        raise ValueError("timeout must be positive and max_pages at least 1")
    resolved = resolve_transport(url, transport)
    return _Options(resolved, protocol, dict(headers or {}), timeout, max_pages, on_list_changed,
                    parse_client_capabilities(client_capabilities))


async def _open(stack: AsyncExitStack, wire: _Wire, options: _Options) -> LiveSession:
    headers, on_list_changed = options.headers, options.on_list_changed
    # Reads are bounded by the deadlines; the event streams must be free to stay open for hours.
    timeouts = httpx2.Timeout(options.timeout, read=None)
    if options.transport == "sse":
        http_transport = _MeteredTransport(wire, sse_event_limit=SSE_CLIENT_EVENT_LIMIT)

        def client_factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(headers=headers, timeout=timeouts, auth=auth, transport=http_transport)

        streams = sse_client(wire.url, headers=headers, httpx_client_factory=client_factory)
    else:
        http_transport = _MeteredTransport(wire, sse_event_limit=wire.limits.max_bytes)
        client = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=timeouts, transport=http_transport)
        )
        streams = streamable_http_client(wire.url, http_client=client, max_sse_event_size=None)
    read_stream, write_stream = await stack.enter_async_context(streams)
    handler = None
    if on_list_changed is not None:

        async def handler(message: Any) -> None:
            if isinstance(message, Exception) or session.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return  # 2026-07-28: the same change also arrives on the listen stream, read there
            for notification_type, kind in _LIST_CHANGED_KINDS:
                if isinstance(message, notification_type):
                    await _call_safely(on_list_changed, kind)

    session = ClientSession(
        _TappedReadStream(read_stream, wire),
        _TappedWriteStream(write_stream, wire),
        message_handler=handler,
        client_info=types.Implementation(name="lockstep", version=_version()),
        **_capability_callbacks(options.client_capabilities),
    )
    await stack.enter_async_context(session)
    live = LiveSession(session, wire, timeout=options.timeout, max_pages=options.max_pages)
    await live._initialize_session(options.protocol)
    if on_list_changed is not None and live.modern:
        # 2026-07-28 delivers list changes only on subscriptions/listen; the task group is
        # left (the stream cancelled) before the session and the transport close.
        listeners = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(listeners.cancel_scope.cancel)
        await listeners.start(live._listen, on_list_changed)
    return live


def _translate(error: BaseException, leaves: list[BaseException], wire: _Wire) -> BaseException:
    """The error to raise for what escaped the connection: Lockstep's own, or transport failures named."""
    if any(not isinstance(leaf, Exception) for leaf in leaves):
        return error  # cancellation, KeyboardInterrupt...: never hidden
    for leaf in leaves:
        if isinstance(leaf, LockstepError):
            return leaf
    if not all(isinstance(leaf, _TRANSPORT_ERRORS) for leaf in leaves):
        return error  # among them the caller's own exception, raised inside ``async with connect(...)``
    wire.dropped.set()
    if wire.fault is not None:
        return wire.fault
    for leaf in leaves:
        if isinstance(leaf, httpx2.SSEError) and "exceeded" in str(leaf):
            return ResponseTooLargeError(f"{wire.waiting_for}: {_one_line(leaf)}")
        if isinstance(leaf, httpx2.HTTPStatusError):
            return ServerUnreachableError(f"{wire.url}: {_http_status(leaf.response)}")
    return ServerUnreachableError(f"{wire.url}: {_one_line(leaves[0]) or type(leaves[0]).__name__}")


_TRANSPORT_ERRORS = (httpx2.HTTPError, httpx2.StreamError, OSError, anyio.BrokenResourceError, MCPError)


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


async def read_interface(
    url: str,
    *,
    transport: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    limits: Limits = DEFAULT_LIMITS,
    max_pages: int = DEFAULT_MAX_PAGES,
    protocol: str = DEFAULT_PROTOCOL,
    client_capabilities: str | Iterable[str] = DEFAULT_CLIENT_CAPABILITIES,
) -> ReadResult:
    """Connect, read the whole interface once, disconnect; ``timeout`` bounds it all.

    ``protocol``: see :data:`PROTOCOLS`; the default tries the 2026-07-28 ``server/discover`` first.
    ``client_capabilities``: what the probe announces (see :data:`CLIENT_CAPABILITIES`; ``()`` none).
    """
    wire = _Wire(url, limits)
    options = _options(url, transport, protocol, headers, timeout, max_pages, None, client_capabilities)
    try:
        with anyio.fail_after(timeout):
            async with _connect(wire, options) as live:
                return await live.read()
    except TimeoutError:
        raise _timed_out(wire, timeout) from None


def _version() -> str:
    from lockstep import __version__

    return __version__
