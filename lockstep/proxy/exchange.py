"""One HTTP request's JSON-RPC context (:class:`Exchange`): who asks, and which method each pending id
is; and the legacy SSE transport's sessions (:class:`LegacyStream`), whose POSTs are answered on the
session's GET stream.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from aiohttp import web

from lockstep.core.mcp_methods import INTERFACE_METHODS
from lockstep.proxy.jsonrpc import id_key

__all__ = ["EndpointKey", "Exchange", "LegacyStream", "Pending", "endpoint_key"]

#: A legacy SSE endpoint URL: its path and its query parameters (in any order).
EndpointKey = tuple[str, frozenset[tuple[str, str]]]


def endpoint_key(url: str) -> EndpointKey:
    parts = urlsplit(url)
    return unquote(parts.path) or "/", frozenset(parse_qsl(parts.query, keep_blank_values=True))


@dataclass
class Exchange:
    """One HTTP request's JSON-RPC context: who asks, and which method each pending id is."""

    principal: str
    client: str
    methods: dict[Any, str]
    #: The URL this request was sent to, as a legacy SSE endpoint (its POSTs are answered on the GET stream).
    legacy_endpoint: EndpointKey | None = None
    #: A legacy SSE session's GET stream: ``methods`` are the pending requests of the session's POSTs
    #: (a :class:`Pending`, shared with its :class:`LegacyStream`), each forgotten once answered.
    answers_posts: bool = False

    @property
    def asks_interface(self) -> bool:
        """Whether a request of this exchange is an interface read (``tools/list``, ``initialize``...)."""
        return any(method in INTERFACE_METHODS for method in self.methods.values())

    @property
    def bears_interface(self) -> bool:
        """Whether an answer in this exchange may carry interface (unknown counts as yes)."""
        return not self.methods or self.asks_interface

    @property
    def strict(self) -> bool:
        """Whether an answer with a key given twice is refused: wherever it may bear interface (a legacy
        stream answers POSTs yet to come, so it always may)."""
        return self.bears_interface or self.answers_posts

    def answer_posts(self, pending: Pending) -> None:
        """Make this (a legacy session's GET stream) the exchange the answers to the session's POSTs come on."""
        self.methods, self.answers_posts = pending, True

    def method_of(self, message: dict[str, Any]) -> str | None:
        """The method of the request ``message`` answers (None: not known); on a legacy stream an answered
        request is forgotten."""
        key = id_key(message.get("id"))
        method = self.methods.get(key)
        if self.answers_posts and "method" not in message:
            self.methods.pop(key, None)  # answered: forget it
        return method


class Pending(dict[Any, str]):
    """Methods of requests whose answers are still to come on a legacy SSE stream (bounded)."""

    LIMIT = 1024

    def add(self, methods: dict[Any, str]) -> None:
        for request_id, method in methods.items():
            if len(self) >= self.LIMIT:
                self.pop(next(iter(self)))
            self[request_id] = method


@dataclass
class LegacyStream:
    """One legacy SSE session's GET stream: answers to its POSTs, and refusals the proxy adds."""

    endpoint: EndpointKey
    response: web.StreamResponse
    exchange: Exchange
    methods: Pending = field(default_factory=Pending)

    def expect(self, post: Exchange) -> None:
        """A POST of this session: its answers come on the stream, for the client it names."""
        self.methods.add(post.methods)
        if post.client != "unknown":
            self.exchange.client = post.client

    async def write(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.response.write(data)
