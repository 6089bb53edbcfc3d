"""The session: one open MCP session that reads every announced list (:class:`LiveSession`).

Also what the probe answers to a server's own requests (sampling refused,
elicitation declined, no roots) and how a list result's pages are checked.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.subscriptions import SubscriptionLost, listen
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from lockstep.core.errors import InterfaceError
from lockstep.core.mcp_methods import LIST_METHODS
from lockstep.core.model import ComponentKind, Interface, Limits, check_json_value
from lockstep.reader._errors import (
    CursorLoopError,
    MalformedResponseError,
    ProtocolError,
    ReaderError,
    ResponseTooLargeError,
    ServerUnreachableError,
    _one_line,
    _short,
)
from lockstep.reader._transport import _timed_out, _Wire

logger = logging.getLogger("lockstep.reader")

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


#: The SDK's request model of each list method (the methods are lockstep.core.mcp_methods').
_LIST_REQUESTS: dict[ComponentKind, Callable[..., Any]] = {
    ComponentKind.TOOL: types.ListToolsRequest,
    ComponentKind.PROMPT: types.ListPromptsRequest,
    ComponentKind.RESOURCE: types.ListResourcesRequest,
    ComponentKind.RESOURCE_TEMPLATE: types.ListResourceTemplatesRequest,
}
_LIST_METHODS = tuple(_ListMethod(method.method, method.list_key, method.capability, _LIST_REQUESTS[method.kind],
                                  optional=method.optional) for method in LIST_METHODS)
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
