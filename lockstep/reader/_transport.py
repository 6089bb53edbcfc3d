"""Transport: which MCP transport a URL takes, and the tap between the HTTP layer and the SDK.

:class:`_Wire` records what the HTTP layer and the stream tap saw (status, the
last raw answer, bytes read) for the session that asks; :class:`_MeteredTransport`
counts and caps the bytes of every answer (``Limits.max_bytes``) and turns HTTP
error statuses into :class:`ServerUnreachableError`; the tapped streams keep the
``result`` of every JSON-RPC response as the transport parsed it off the wire.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import types
from mcp.shared.message import SessionMessage

from lockstep.core.model import Limits
from lockstep.reader._errors import (
    MalformedResponseError,
    ReaderError,
    ReadTimeoutError,
    ResponseTooLargeError,
    ServerUnreachableError,
    _one_line,
)

TRANSPORTS = ("streamable-http", "sse")
#: The SDK's SSE client (``sse_client``) refuses a single event larger than this.
SSE_CLIENT_EVENT_LIMIT = 1024 * 1024


def resolve_transport(url: str, transport: str | None = None) -> str:
    """``sse`` when the URL path ends with ``/sse``, else ``streamable-http``; or check ``transport``."""
    if transport is None:
        return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "streamable-http"
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}")
    return transport


@dataclass(eq=False)
class _Wire:
    """What the HTTP layer and the stream tap saw, shared with the session that asks."""

    url: str
    limits: Limits
    results: dict[Any, dict[str, Any]] = field(default_factory=dict)
    sent: dict[str, Any] = field(default_factory=dict)  # method -> id of the last request sent
    bytes_received: int = 0
    fault: ReaderError | None = None
    dropped: anyio.Event = field(default_factory=anyio.Event)
    waiting_for: str = "the connection"
    _on_fault: Callable[[], None] | None = None

    def fail(self, error: ReaderError) -> None:
        """Record the first fault of the current call and cancel that call."""
        if self.fault is None:
            self.fault = error
        if self._on_fault is not None:
            self._on_fault()

    def drop(self, error: ReaderError) -> None:
        self.dropped.set()
        self.fail(error)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Run one call; a fault seen meanwhile cancels it and is raised instead."""
        self.fault = None
        with anyio.CancelScope() as scope:
            self._on_fault = scope.cancel
            try:
                yield
            finally:
                self._on_fault = None
        if self.fault is not None:
            raise self.fault

    def observe(self, item: SessionMessage | Exception) -> None:
        if isinstance(item, Exception):
            self.fail(MalformedResponseError(f"{self.waiting_for}: unreadable message: {_one_line(item)}"))
            return
        message = item.message
        if isinstance(message, types.JSONRPCResponse) and message.id in self.sent.values():
            self.results[message.id] = message.result  # only answers someone will take: no growth

    def note_sent(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            self.results.pop(self.sent.get(message.method), None)  # a late answer to a failed call
            self.sent[message.method] = message.id

    def take_result(self, method: str) -> dict[str, Any]:
        request_id = self.sent.get(method)
        if request_id not in self.results:
            raise MalformedResponseError(f"{method}: no result received")
        return self.results.pop(request_id)


class _TappedStream:
    """A transport stream wrapped for the wire; closing and context management go to the inner stream."""

    def __init__(self, inner: Any, wire: _Wire) -> None:
        self._inner, self._wire = inner, wire

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        return bool(await self._inner.__aexit__(*exc_info))


class _TappedReadStream(_TappedStream):
    """The transport's read stream, seen by the wire before the SDK's session parses it."""

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._wire.drop(ServerUnreachableError(f"{self._wire.url}: the server closed the connection"))
            raise
        self._wire.observe(item)
        return item

    def __aiter__(self) -> _TappedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _TappedWriteStream(_TappedStream):
    """The transport's write stream; notes the id of each request the session sends."""

    async def send(self, item: SessionMessage, /) -> None:
        self._wire.note_sent(item)
        await self._inner.send(item)


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class _MeteredStream(httpx2.AsyncByteStream):
    """A response body that counts its bytes and stops past the limit.

    An event stream is limited per event (the bytes since the last blank line), so a
    long-lived stream of small notifications never trips it; any other body as a whole.
    """

    def __init__(self, inner: Any, wire: _Wire, *, per_event: bool, limit: int) -> None:
        self._inner, self._wire, self._per_event, self._limit = inner, wire, per_event, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0  # of the event (or body) in progress
        async for chunk in self._inner:
            self._wire.bytes_received += len(chunk)
            parts = _EVENT_END.split(chunk) if self._per_event else [chunk]
            size += len(parts[0])
            largest = size
            for part in parts[1:]:
                size = len(part)
                largest = max(largest, size)
            if largest > self._limit:
                error = ResponseTooLargeError(
                    f"{self._wire.waiting_for}: an answer larger than the limit of {self._limit} bytes"
                )
                self._wire.fail(error)
                raise httpx2.ReadError(str(error))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _MeteredTransport(httpx2.AsyncBaseTransport):
    """The HTTP transport under the SDK: meters bodies, reports refused connections and error statuses."""

    def __init__(self, wire: _Wire, *, sse_event_limit: int) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._wire = wire
        self._sse_event_limit = sse_event_limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # The limits count the bytes that reach the JSON parser: ask for them uncompressed, and refuse a
        # body encoded anyway (1 MB of gzip can decode to 1 GiB, far past any limit counted before decoding).
        request.headers["Accept-Encoding"] = "identity"
        try:
            response = await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as error:
            self._wire.drop(ServerUnreachableError(f"{self._wire.url}: cannot connect: {_one_line(error)}"))
            raise
        if response.status_code == 404 and "mcp-session-id" in request.headers:
            # The server no longer knows the session (it restarted): the client must start a new one.
            # A call in flight fails on its own 404; this marks the session for whoever reconnects.
            self._wire.dropped.set()
        probing = request.headers.get("mcp-method") == "server/discover"  # a refusal means: use initialize
        if response.status_code >= 400 and request.method == "POST" and not probing:
            self._wire.fail(ServerUnreachableError(f"{self._wire.url}: {_http_status(response)}"))
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            refusal = ResponseTooLargeError(f"{self._wire.url}: the server answered with Content-Encoding "
                                            f"{encoding[:40]!r} although the reader asked for identity; a "
                                            "compressed body is refused (its decoded size is unbounded)")
            self._wire.fail(refusal)
            raise httpx2.DecodingError(str(refusal), request=request)
        content_type = response.headers.get("content-type", "").lower()
        per_event = content_type.startswith("text/event-stream")
        limit = (
            min(self._wire.limits.max_bytes, self._sse_event_limit)
            if per_event
            else self._wire.limits.max_bytes
        )
        response.stream = _MeteredStream(response.stream, self._wire, per_event=per_event, limit=limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _timed_out(wire: _Wire, timeout: float) -> ReadTimeoutError:
    return ReadTimeoutError(
        f"{wire.url}: no complete answer within {timeout:g}s (waiting for {wire.waiting_for})"
    )


def _http_status(response: httpx2.Response) -> str:
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()
