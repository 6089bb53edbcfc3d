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

The package by subject: ``_errors`` (the tree above), ``_transport`` (which transport a
URL takes, the HTTP transport that meters answers, the tap that keeps the wire JSON),
``_session`` (:class:`LiveSession`: reading every list on one open session) and ``_read``
(:func:`connect`, :func:`read_interface`, and the one place where foreign errors become
:class:`ReaderError`). Import from ``lockstep.reader``; the submodules are private.
"""

from __future__ import annotations

from lockstep.core.capabilities import (
    CLIENT_CAPABILITIES,
    DEFAULT_CLIENT_CAPABILITIES,
    parse_client_capabilities,
)
from lockstep.reader._errors import (
    CursorLoopError,
    MalformedResponseError,
    ProtocolError,
    ReadTimeoutError,
    ReaderError,
    ResponseTooLargeError,
    ServerUnreachableError,
)
from lockstep.reader._read import DEFAULT_MAX_PAGES as DEFAULT_MAX_PAGES
from lockstep.reader._read import (
    DEFAULT_PROTOCOL,
    DEFAULT_TIMEOUT,
    PROTOCOLS,
    connect,
    read_interface,
)
from lockstep.reader._session import ListChangedCallback as ListChangedCallback
from lockstep.reader._session import (
    LiveSession,
    ReadResult,
)
from lockstep.reader._session import _capability_callbacks as _capability_callbacks  # tests/foreign
from lockstep.reader._transport import SSE_CLIENT_EVENT_LIMIT as SSE_CLIENT_EVENT_LIMIT
from lockstep.reader._transport import (
    TRANSPORTS,
    resolve_transport,
)

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
