"""Reading a live MCP server's interface with the ``mcp`` SDK (2.x) client.

:func:`read_interface` connects over streamable HTTP or SSE, asks the 2026-07-28
``server/discover`` (falling back to the ``initialize`` handshake of earlier revisions;
see :data:`PROTOCOLS`), then every list method the server's capabilities announce (``tools/list``,
``prompts/list``, ``resources/list``, ``resources/templates/list``), follows every
``nextCursor`` and returns the interface document: the instructions and each list's
items concatenated over pages, each item exactly as the server sent it on the wire.
:func:`connect` keeps one session open for repeated reads and ``list_changed``
changes (the sidecar; in the 2026-07-28 era on a ``subscriptions/listen`` stream)::

    result = await read_interface("http://127.0.0.1:8080/mcp", headers={"Authorization": "Bearer t"})
    result.interface, result.document, result.protocol_version

    async with connect(url, on_list_changed=changed) as live:
        result = await live.read()          # re-reads every list on the same session

The SDK's pydantic models are never dumped again: a tap between the transport and
the SDK's ``ClientSession`` keeps the ``result`` of every JSON-RPC response as the
transport parsed it off the wire, and the reader uses that. The SDK's own validation
of list results is ignored, so the core judges the items (a tool without a name is a
``MissingKeyError``, duplicates a ``DuplicateComponentError``: ``InterfaceError``
subclasses, not :class:`ReaderError`).

Errors::

    ReaderError                    the server could not be read (``reason``: CamelCase word)
    ├── ServerUnreachableError     connection refused, HTTP error status, connection dropped
    ├── ReadTimeoutError           no complete read within the deadline
    ├── MalformedResponseError     an answer that is not JSON-RPC or not shaped like a list result
    ├── ResponseTooLargeError      one answer, or all answers of one read, over ``Limits.max_bytes``
    ├── CursorLoopError            a repeated ``nextCursor``, or more than ``max_pages`` pages
    └── ProtocolError              a JSON-RPC error, or a protocol version this client does not speak
"""

from __future__ import annotations

import inspect
import logging
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost, listen
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from lockstep.core.capabilities import CLIENT_CAPABILITIES, DEFAULT_CLIENT_CAPABILITIES, parse_client_capabilities
from lockstep.core.errors import InterfaceError, LockstepError
from lockstep.core.model import DEFAULT_LIMITS, Interface, Limits, check_json_value

__all__ = [
    "CLIENT_CAPABILITIES",
    "DEFAULT_CLIENT_CAPABILITIES",
    "DEFAULT_PROTOCOL",
    "DEFAULT_TIMEOUT",
    "PROTOCOLS",
    "TRANSPORTS",
    "CursorLoopError",
    "LiveSession",
    "MalformedResponseError",
    "ProtocolError",
    "ReadResult",
    "ReadTimeoutError",
    "ReaderError",
    "ResponseTooLargeError",
    "ServerUnreachableError",
    "connect",
    "parse_client_capabilities",
    "read_interface",
    "resolve_transport",
]

logger = logging.getLogger("lockstep.reader")

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_PAGES = 1000
TRANSPORTS = ("streamable-http", "sse")
#: ``auto`` (the default): the 2026-07-28 ``server/discover`` first, the ``initialize``
#: handshake (2025-06-18, 2025-11-25...) when the server does not answer it.
#: ``discover``: 2026-07-28 only. ``handshake``: ``initialize`` only.
PROTOCOLS = ("auto", "discover", "handshake")
DEFAULT_PROTOCOL = "auto"
#: The SDK's SSE client (``sse_client``) refuses a single event larger than this.
SSE_CLIENT_EVENT_LIMIT = 1024 * 1024

ListChangedCallback = Callable[[str], Awaitable[None] | None]


# The probe announces capabilities so that it is shown what agents are shown; it never acts on them.
# A server's request is answered at once, harmlessly, and leaks nothing: sampling is refused (no model
# behind the probe), elicitation declined (no user behind it), roots is an empty list (no files).
async def _refuse_sampling(context: Any, params: Any) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message="the lockstep probe does not sample")


async def _decline_elicitation(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


async def _no_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


def _capability_callbacks(capabilities: tuple[str, ...]) -> dict[str, Any]:
    """ClientSession keyword arguments: the SDK announces a capability exactly when its callback is given."""
    callbacks = {"sampling": ("sampling_callback", _refuse_sampling),
                 "elicitation": ("elicitation_callback", _decline_elicitation),
                 "roots": ("list_roots_callback", _no_roots)}
    return dict(callbacks[name] for name in capabilities)


# ---------------------------------------------------------------- errors


class ReaderError(LockstepError):
    """The live server could not be read; the message is one line."""

    reason = "ReadFailed"


class ServerUnreachableError(ReaderError):
    """No connection, an HTTP error status, or the connection dropped."""

    reason = "ServerUnreachable"


class ReadTimeoutError(ReaderError):
    """The server did not answer everything within the deadline."""

    reason = "ReadTimeout"


class MalformedResponseError(ReaderError):
    """An answer that is not valid JSON-RPC, or not shaped like the result asked for."""

    reason = "MalformedResponse"


class ResponseTooLargeError(ReaderError):
    """One answer, or the answers of one read together, exceed the byte limit."""

    reason = "ResponseTooLarge"


class CursorLoopError(ReaderError):
    """Pagination that does not end: a repeated cursor, or too many pages."""

    reason = "CursorLoop"


class ProtocolError(ReaderError):
    """The server answered with a JSON-RPC error, or speaks a protocol version we do not."""

    reason = "ProtocolError"


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class ReadResult:
    """One complete read of a server's interface."""

    #: ``instructions`` and each announced list (wire JSON, pages concatenated), plus ``serverInfo``.
    document: dict[str, Any]
    interface: Interface
    protocol_version: str
    server_info: dict[str, Any]


@dataclass(frozen=True)
class _ListMethod:
    method: str
    list_key: str
    capability: str
    request: Callable[..., Any]  # the SDK's request model, called with params=
    optional: bool = False  # a server may announce the capability without serving the method


_LIST_METHODS = (
    _ListMethod("tools/list", "tools", "tools", types.ListToolsRequest),
    _ListMethod("prompts/list", "prompts", "prompts", types.ListPromptsRequest),
    _ListMethod("resources/list", "resources", "resources", types.ListResourcesRequest),
    _ListMethod(
        "resources/templates/list",
        "resourceTemplates",
        "resources",
        types.ListResourceTemplatesRequest,
        optional=True,
    ),
)
_LIST_CHANGED_KINDS: tuple[tuple[type[Any], str], ...] = (
    (types.ToolListChangedNotification, "tools"),
    (types.PromptListChangedNotification, "prompts"),
    (types.ResourceListChangedNotification, "resources"),
)
_EVENT_KINDS: dict[type[Any], str] = {
    ToolsListChanged: "tools",
    PromptsListChanged: "prompts",
    ResourcesListChanged: "resources",
}
_ANY_RESULT: TypeAdapter[Any] = TypeAdapter(Any)


async def _call_safely(callback: ListChangedCallback, kind: str) -> None:
    try:
        outcome = callback(kind)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:  # a failing callback must not end the session
        logger.exception("on_list_changed callback raised")


def resolve_transport(url: str, transport: str | None = None) -> str:
    """``sse`` when the URL path ends with ``/sse``, else ``streamable-http``; or check ``transport``."""
    if transport is None:
        return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "streamable-http"
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}")
    return transport


# ---------------------------------------------------------------- the wire tap


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


# ---------------------------------------------------------------- the session


class LiveSession:
    """One open MCP session; :meth:`read` re-reads every list the server announced."""

    def __init__(self, session: ClientSession, wire: _Wire, *, timeout: float, max_pages: int) -> None:
        self._session, self._wire = session, wire
        self._timeout, self._max_pages = timeout, max_pages
        self._lock = anyio.Lock()
        self._initialize: dict[str, Any] = {}
        self._listening: tuple[str, ...] = ()
        self._opening_unread = False  # the opening's initialize or discover answer awaits the first read

    @property
    def url(self) -> str:
        return self._wire.url

    @property
    def protocol_version(self) -> str:
        return self._session.protocol_version or ""

    @property
    def server_info(self) -> dict[str, Any]:
        """``serverInfo`` of the initialize result, or the discover result's ``_meta`` stamp."""
        info = self._initialize.get("serverInfo")
        if info is None and isinstance(meta := self._initialize.get("_meta"), dict):
            info = meta.get(SERVER_INFO_META_KEY)
        return info if isinstance(info, dict) else {}

    @property
    def capabilities(self) -> dict[str, Any]:
        capabilities = self._initialize.get("capabilities")
        return capabilities if isinstance(capabilities, dict) else {}

    @property
    def dropped(self) -> bool:
        """True once the connection failed or the server closed it: reconnect."""
        return self._wire.dropped.is_set()

    async def wait_dropped(self) -> None:
        """Return when the connection fails or the server closes it."""
        await self._wire.dropped.wait()

    async def read(self) -> ReadResult:
        """Read every announced list again (all pages) and validate the interface."""
        async with self._lock:
            try:
                with anyio.fail_after(self._timeout):
                    document = await self._read_document()
            except TimeoutError:
                raise _timed_out(self._wire, self._timeout) from None
        interface = Interface.from_document(document, self._wire.limits)
        return ReadResult(document, interface, self.protocol_version, self.server_info)

    async def _initialize_session(self, protocol: str) -> None:
        self._wire.waiting_for = "initialize" if protocol == "handshake" else "server/discover"
        try:
            with self._wire.guard():
                if protocol == "auto":
                    await self._negotiate()
                elif protocol == "discover":
                    await self._session.discover()
                else:
                    await self._session.initialize()
        except ValidationError as error:
            raise MalformedResponseError(
                f"{self._wire.waiting_for}: not an MCP initialize result: {_one_line(error)}"
            ) from None
        except MCPError as error:
            raise self._rpc_failure(self._wire.waiting_for, error) from None
        except RuntimeError as error:  # the SDK refuses the protocol version the server chose
            raise ProtocolError(f"{self._wire.waiting_for}: {_one_line(error)}") from None
        self._initialize = self._wire.take_result(self._wire.waiting_for)
        _check_plain_json(self._wire.waiting_for, self._initialize, self._wire.limits)
        self._opening_unread = True

    async def _negotiate(self) -> None:
        """2026-07-28 ``server/discover`` first; anything but a modern answer falls back to ``initialize``."""
        try:
            await self._session.discover()
        except (MCPError, RuntimeError, ValidationError) as error:
            logger.debug("%s: server/discover failed (%s); using initialize", self.url, _one_line(error))
            self._wire.waiting_for = "initialize"
            await self._session.initialize()

    async def _rediscover(self) -> None:
        """2026-07-28 has no session: ask ``server/discover`` again for current instructions and capabilities."""
        self._wire.waiting_for = "server/discover"
        try:
            with self._wire.guard():
                await self._session.send_discover(self.protocol_version)
        except MCPError as error:
            raise self._rpc_failure("server/discover", error) from None
        self._initialize = self._wire.take_result("server/discover")
        _check_plain_json("server/discover", self._initialize, self._wire.limits)

    async def _read_document(self) -> dict[str, Any]:
        if self._opening_unread:
            self._opening_unread = False  # the opening's answer is fresh: this read uses it
        elif self.modern:
            await self._rediscover()
        start = self._wire.bytes_received
        document: dict[str, Any] = {}
        instructions = self._initialize.get("instructions")
        if instructions is not None:
            document["instructions"] = instructions
        for list_method in _LIST_METHODS:
            if self.capabilities.get(list_method.capability) is None:
                continue
            items = await self._read_list(list_method, start, count=sum(map(len, _lists(document))))
            if items is not None:
                document[list_method.list_key] = items
        document["serverInfo"] = self.server_info
        return document

    async def _read_list(self, list_method: _ListMethod, start: int, count: int) -> list[Any] | None:
        items: list[Any] = []
        cursors: set[str] = set()
        cursor: str | None = None
        for page in range(1, self._max_pages + 1):
            result = await self._request(list_method, cursor)
            if result is None:
                return None
            items.extend(_page_items(list_method, result, page))
            self._check_size(list_method.method, start, count + len(items))
            cursor = _next_cursor(list_method, result)
            if cursor is None:
                return items
            if cursor in cursors:
                raise CursorLoopError(
                    f"{list_method.method}: the server repeated cursor {_short(cursor)} after {page} pages"
                )
            cursors.add(cursor)
        raise CursorLoopError(f"{list_method.method}: more than {self._max_pages} pages")

    async def _request(self, list_method: _ListMethod, cursor: str | None) -> dict[str, Any] | None:
        """One list request; the raw wire result, or None for an optional method the server lacks."""
        self._wire.waiting_for = list_method.method
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        try:
            with self._wire.guard():
                await self._session.send_request(list_method.request(params=params), _ANY_RESULT)
        except ValidationError:
            pass  # the SDK's model refused the result; Lockstep judges the wire JSON itself below
        except MCPError as error:
            if list_method.optional and error.code == types.METHOD_NOT_FOUND:
                return None
            raise self._rpc_failure(list_method.method, error) from None
        return self._wire.take_result(list_method.method)

    def _check_size(self, method: str, start: int, count: int) -> None:
        limits = self._wire.limits
        if self._wire.bytes_received - start > limits.max_bytes:
            raise ResponseTooLargeError(f"{method}: the answers of one read exceed {limits.max_bytes} bytes")
        if count > limits.max_components:
            raise ResponseTooLargeError(f"{method}: more than {limits.max_components} components")

    def _rpc_failure(self, method: str, error: MCPError) -> ReaderError:
        if error.code == types.PARSE_ERROR:
            return MalformedResponseError(
                f"{method}: the answer is not valid JSON-RPC: {_one_line(error.message)}"
            )
        if error.code == types.CONNECTION_CLOSED:
            self._wire.dropped.set()
            return ServerUnreachableError(f"{self.url}: connection closed while waiting for {method}")
        return ProtocolError(f"{method}: the server answered error {error.code}: {_one_line(error.message)}")

    @property
    def modern(self) -> bool:
        """True when the session speaks the 2026-07-28 era (``server/discover``, no handshake)."""
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def listening(self) -> tuple[str, ...]:
        """The lists whose changes arrive on the open ``subscriptions/listen`` stream (2026-07-28)."""
        return self._listening

    def _announced_changes(self) -> dict[str, bool]:
        """Each list whose capability announces ``listChanged``: the listen filter."""
        announced = {}
        for kind in ("tools", "prompts", "resources"):
            capability = self.capabilities.get(kind)
            announced[kind] = isinstance(capability, dict) and capability.get("listChanged") is True
        return announced

    async def _listen(self, callback: ListChangedCallback, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold ``subscriptions/listen`` open and pass each list change to ``callback``.

        The stream's end, graceful or not, marks the session dropped: changes would go unseen
        until the next timer, so the owner reconnects (and re-reads) instead.
        """
        announced = self._announced_changes()
        if not any(announced.values()):
            task_status.started()
            return
        self._wire.waiting_for = "subscriptions/listen"
        try:
            async with listen(
                self._session,
                tools_list_changed=announced["tools"],
                prompts_list_changed=announced["prompts"],
                resources_list_changed=announced["resources"],
            ) as subscription:
                honored = subscription.honored
                self._listening = tuple(
                    kind for kind in ("tools", "prompts", "resources") if getattr(honored, f"{kind}_list_changed")
                )
                task_status.started()
                async for event in subscription:
                    kind = _EVENT_KINDS.get(type(event))
                    if kind is not None:
                        await _call_safely(callback, kind)
            ended = "the server closed the subscriptions/listen stream"
        except SubscriptionLost as error:
            ended = f"subscriptions/listen was lost: {_one_line(error)}"
        except MCPError as error:  # raised while opening only: later failures end as SubscriptionLost
            failure = self._rpc_failure("subscriptions/listen", error)
            if not isinstance(failure, ServerUnreachableError):
                # The server announced list changes but refuses to deliver them: read on the timer only.
                logger.warning("%s: %s; list changes will be seen on the timer only", self.url, failure)
                task_status.started()
                return
            ended = str(failure)
        self._listening = ()
        logger.info("%s: %s; reconnecting", self.url, ended)
        self._wire.dropped.set()


def _page_items(list_method: _ListMethod, result: dict[str, Any], page: int) -> list[Any]:
    items = result.get(list_method.list_key)
    if not isinstance(items, list):
        found = "no" if items is None else f"a {type(items).__name__} for"
        raise MalformedResponseError(
            f"{list_method.method}: page {page} has {found} {list_method.list_key!r} list"
        )
    return items


def _next_cursor(list_method: _ListMethod, result: dict[str, Any]) -> str | None:
    cursor = result.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise MalformedResponseError(f"{list_method.method}: nextCursor is not a string")
    return cursor


def _lists(document: dict[str, Any]) -> Iterator[list[Any]]:
    return (value for value in document.values() if isinstance(value, list))


def _check_plain_json(method: str, result: dict[str, Any], limits: Limits) -> None:
    try:
        check_json_value(result, limits)
    except InterfaceError as error:
        raise MalformedResponseError(f"{method}: {error}") from None


# ---------------------------------------------------------------- connecting


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


def _timed_out(wire: _Wire, timeout: float) -> ReadTimeoutError:
    return ReadTimeoutError(
        f"{wire.url}: no complete answer within {timeout:g}s (waiting for {wire.waiting_for})"
    )


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


# ---------------------------------------------------------------- helpers


def _http_status(response: httpx2.Response) -> str:
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


def _one_line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(cursor: str) -> str:
    return repr(cursor if len(cursor) <= 40 else cursor[:37] + "...")


def _version() -> str:
    from lockstep import __version__

    return __version__
