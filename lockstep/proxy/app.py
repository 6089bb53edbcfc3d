"""``lockstep proxy``: an MCP-aware reverse proxy that lets only approved interface reach clients.

Every request goes to the same path on the upstream origin, with its headers (``Host``
becomes the upstream's; hop-by-hop headers are the connection's own). Every response
comes back with its status and headers, byte for byte, except for what the
:class:`~lockstep.proxy.policy.InterfacePolicy` withholds:

- ``application/json`` bodies are read whole (up to the limit) and judged;
- ``text/event-stream`` bodies (the POST streams of streamable HTTP, its GET stream,
  ``subscriptions/listen``, the legacy SSE transport's stream) are cut into events; an
  event is judged and flushed as soon as it is whole, and every other event, comment and
  priming event goes out as received;
- anything else streams through untouched.

A compressed upstream body is decoded before it is judged (and sent on decoded, without
``Content-Encoding``). What cannot be judged fails closed: a body or event over the limit,
or a list answer that is not JSON, is refused unless the request was known to be neither
an interface read nor unknown.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web
from mcp_types import CLIENT_INFO_META_KEY
from opentelemetry import trace

from lockstep.core.gate import ComponentGate
from lockstep.proxy.metrics import ProxyMetrics
from lockstep.proxy.policy import (
    INTERFACE_METHODS,
    REFUSED_CODE,
    CallDecision,
    Finding,
    InterfacePolicy,
    Mode,
    principal_of,
)
from lockstep.proxy.sse import EventSplitter, EventTooLargeError, SseEvent, parse_event, replace_data

__all__ = ["DEFAULT_MAX_BODY", "ProxyApp", "ProxyConfigError", "serve_proxy"]

logger = logging.getLogger("lockstep.proxy")
tracer = trace.get_tracer("lockstep.proxy")

DEFAULT_MAX_BODY = 16 * 1024 * 1024
#: Request headers that belong to one connection, not to the message (RFC 9110 7.6.1), and the
#: ones aiohttp computes for the body it sends.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length"})
_RESPONSE_DROPPED = _HOP_BY_HOP | {"content-encoding"}
#: Client names kept as metric labels; later ones are counted as "other".
MAX_CLIENT_LABELS = 20
#: Sessions remembered (their client name, or their legacy SSE stream).
MAX_SESSIONS = 10_000


class ProxyConfigError(ValueError):
    """An upstream URL the proxy cannot use."""


@dataclass
class _Exchange:
    """One HTTP request's JSON-RPC context: who asks, and which method each pending id is."""

    principal: str
    client: str
    methods: dict[Any, str]
    #: The legacy SSE transport's ``session_id`` (its POSTs are answered on the GET stream).
    legacy_session: str = ""

    @property
    def asks_interface(self) -> bool:
        """Whether a request of this exchange is an interface read (``tools/list``, ``initialize``...)."""
        return any(method in INTERFACE_METHODS for method in self.methods.values())

    @property
    def bears_interface(self) -> bool:
        """Whether an answer in this exchange may carry interface (unknown counts as yes)."""
        return not self.methods or self.asks_interface


class _Pending(dict[Any, str]):
    """Methods of requests whose answers are still to come on a legacy SSE stream (bounded)."""

    LIMIT = 1024

    def add(self, methods: dict[Any, str]) -> None:
        for request_id, method in methods.items():
            if len(self) >= self.LIMIT:
                self.pop(next(iter(self)))
            self[request_id] = method


@dataclass
class _LegacyStream:
    """One legacy SSE session's GET stream: answers to its POSTs, and refusals the proxy adds."""

    session_id: str
    response: web.StreamResponse
    exchange: _Exchange
    methods: _Pending = field(default_factory=_Pending)

    def expect(self, post: _Exchange) -> None:
        """A POST of this session: its answers come on the stream, for the client it names."""
        self.methods.add(post.methods)
        if post.client != "unknown":
            self.exchange.client = post.client

    async def write(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.response.write(data)


class ProxyApp:
    """The proxy's request handler, bound to one upstream MCP server."""

    def __init__(self, upstream: str, gate: ComponentGate, mode: Mode = Mode.QUARANTINE, *,
                 on_finding: Callable[[Finding], None] | None = None, metrics: ProxyMetrics | None = None,
                 max_body: int = DEFAULT_MAX_BODY) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ProxyConfigError(f"--upstream must be an http(s) URL such as http://127.0.0.1:8080/mcp, "
                                   f"not {upstream!r}")
        self.upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self.policy = InterfacePolicy(gate, mode, on_finding=self._found)
        self.metrics = metrics or ProxyMetrics()
        self.max_body = max_body
        self._on_finding = on_finding
        self._clients: dict[str, str] = {}  # session id -> client name (the 2025 handshake names it once)
        self._client_labels: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._legacy: dict[str, _LegacyStream] = {}

    def _found(self, finding: Finding) -> None:
        self.metrics.finding(finding, self._client_label(finding.client))
        logger.warning(json.dumps({"event": "lockstep.withheld", "action": finding.action,
                                   "component": finding.verdict.ref, "reason": finding.verdict.reason.value,
                                   "digest": finding.verdict.digest, "method": finding.method,
                                   "principal": finding.principal, "client": finding.client}))
        if self._on_finding is not None:
            self._on_finding(finding)

    def web_app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.cleanup_ctx.append(self._client_session)
        return app

    def metrics_app(self) -> web.Application:
        """``/metrics`` in the Prometheus text format."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        async def serve_metrics(request: web.Request) -> web.Response:
            response = web.Response(body=generate_latest(self.metrics.registry))
            response.headers["Content-Type"] = CONTENT_TYPE_LATEST
            return response

        app = web.Application()
        app.router.add_get("/metrics", serve_metrics)
        return app

    async def _client_session(self, app: web.Application) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=None)  # streams stay open for hours
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=True) as session:
            self._session = session
            yield
        self._session = None

    # ------------------------------------------------------------ requests

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        exchange, messages = self._exchange(request, body)
        self.metrics.requests.labels(request.method).inc()
        if isinstance(messages, list):
            return _jsonrpc_response(BATCH_REFUSAL, status=400)
        decision = self.policy.decide_call(messages, exchange.principal, exchange.client)
        legacy = self._legacy.get(exchange.legacy_session)
        if decision is not None and decision.error is not None:
            self.metrics.calls.labels("refused").inc()
            if legacy is not None:  # the legacy SSE transport answers on its GET stream, never in the POST
                await legacy.write(_event_bytes(decision.error))
                return web.Response(status=202, text="Accepted")
            return _jsonrpc_response(decision.error)
        if legacy is not None:
            legacy.expect(exchange)
        if decision is not None:
            return await self._forward_call(request, body, exchange, decision, messages)
        return await self._forward(request, body, exchange)

    async def _forward_call(self, request: web.Request, body: bytes, exchange: _Exchange,
                            decision: CallDecision, message: dict[str, Any]) -> web.StreamResponse:
        """Forward an allowed call, stamped with the approved digest it was checked against."""
        self.metrics.calls.labels("forwarded").inc()
        digest = ",".join(decision.digests)
        logger.info(json.dumps({"event": "lockstep.call", "method": message["method"],
                                "component": f"{decision.kind.value}/{decision.key}", "digest": digest,
                                "principal": exchange.principal, "client": exchange.client}))
        with tracer.start_as_current_span(f"{message['method']} {decision.key}") as span:
            span.set_attribute("mcp.method.name", message["method"])
            span.set_attribute("lockstep.component", f"{decision.kind.value}/{decision.key}")
            span.set_attribute("lockstep.component.digest", digest)
            span.set_attribute("lockstep.principal", exchange.principal)
            return await self._forward(request, body, exchange)

    def _exchange(self, request: web.Request, body: bytes) -> tuple[_Exchange, Any]:
        principal = principal_of(request.headers.get("Authorization"))
        session_id = request.headers.get("Mcp-Session-Id") or request.query.get("session_id") or ""
        messages: Any = None
        if request.method == "POST" and body:
            try:
                messages = json.loads(body)
            except ValueError:
                messages = None  # the server answers malformed JSON itself
        client = self._client_name(messages, session_id)
        methods: dict[Any, str] = {}
        for message in messages if isinstance(messages, list) else [messages]:
            if isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message:
                methods[_id_key(message["id"])] = message["method"]
        return _Exchange(principal, client, methods, request.query.get("session_id", "")), messages

    def _client_name(self, message: Any, session_id: str) -> str:
        params = message.get("params") if isinstance(message, dict) else None
        info = None
        if isinstance(params, dict):
            info = params.get("clientInfo")
            meta = params.get("_meta")
            if info is None and isinstance(meta, dict):
                info = meta.get(CLIENT_INFO_META_KEY)
        name = info.get("name") if isinstance(info, dict) else None
        if isinstance(name, str) and name:
            name = name[:64]
            self._remember_client(session_id, name)
            return name
        return self._clients.get(session_id, "unknown")

    def _remember_client(self, session_id: str | None, name: str) -> None:
        """The 2025 handshake names the client once per session: keep it for the session's later requests."""
        if session_id and name != "unknown" and len(self._clients) < MAX_SESSIONS:
            self._clients[session_id] = name

    def _client_label(self, client: str) -> str:
        if client in self._client_labels or len(self._client_labels) < MAX_CLIENT_LABELS:
            self._client_labels.add(client)
            return client
        return "other"

    # ------------------------------------------------------------ responses

    async def _forward(self, request: web.Request, body: bytes, exchange: _Exchange) -> web.StreamResponse:
        assert self._session is not None, "the proxy's client session is not open"
        headers = [(name, value) for name, value in request.headers.items() if name.lower() not in _HOP_BY_HOP]
        url = self.upstream_origin + request.raw_path
        started = time.perf_counter()
        try:
            upstream = await self._session.request(request.method, url, headers=headers, data=body or None,
                                                   allow_redirects=False)
        except (aiohttp.ClientError, OSError) as error:
            logger.warning("upstream %s unreachable: %s", self.upstream_origin, error)
            return web.Response(status=502, text=f"lockstep proxy: the upstream server is unreachable: {error}\n")
        async with upstream:
            self.metrics.upstream_seconds.observe(time.perf_counter() - started)
            self._remember_client(upstream.headers.get("Mcp-Session-Id"), exchange.client)
            content_type = upstream.headers.get("Content-Type", "").lower()
            if content_type.startswith("application/json"):
                return await self._json(request, upstream, exchange)
            if content_type.startswith("text/event-stream"):
                return await self._events(request, upstream, exchange)
            if exchange.asks_interface and upstream.status == 200:
                # An interface read answered as something the proxy does not judge: a client may parse it.
                return self._refuse_unjudged(exchange, f"an answer of Content-Type {content_type[:60]!r}")
            return await self._passthrough(request, upstream)

    async def _json(self, request: web.Request, upstream: aiohttp.ClientResponse,
                    exchange: _Exchange) -> web.StreamResponse:
        body, complete = await _read_limited(upstream, self.max_body)
        if not complete:
            if exchange.bears_interface:
                return self._refuse_unjudged(exchange, f"an answer larger than {self.max_body} bytes")
            return await self._passthrough(request, upstream, head=body)  # a call's large result
        try:
            replacement = self._judge_text(body, exchange)
        except ValueError:
            if exchange.asks_interface:
                return self._refuse_unjudged(exchange, "an answer that is not JSON")
            replacement = None
        if replacement is not None:
            body = replacement.encode()
        response = web.Response(status=upstream.status, reason=upstream.reason, body=body)
        _copy_headers(upstream, response)
        return response

    async def _events(self, request: web.Request, upstream: aiohttp.ClientResponse,
                      exchange: _Exchange) -> web.StreamResponse:
        response = _response_like(upstream)
        response.headers["X-Accel-Buffering"] = "no"
        await response.prepare(request)
        splitter = EventSplitter(self.max_body)
        legacy: _LegacyStream | None = None
        try:
            async for chunk in upstream.content.iter_any():
                for raw in splitter.feed(chunk):
                    event = parse_event(raw)
                    if event.event == "endpoint" and event.data and legacy is None:
                        legacy, raw = self._legacy_stream(event, raw, response, exchange)
                        await response.write(raw)
                        continue
                    await response.write(self._event(event, exchange))
        except EventTooLargeError as error:
            # The rest of this stream cannot be judged: end it (the client sees a dropped stream).
            logger.warning("closing an event stream from %s: %s", self.upstream_origin, error)
            self.metrics.unjudged.inc()
            return response
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as error:
            logger.info("the upstream stream ended: %s", error)
        finally:
            if legacy is not None:
                self._legacy.pop(legacy.session_id, None)
        with contextlib.suppress(ConnectionError):
            await response.write(splitter.rest())
            await response.write_eof()
        return response

    def _legacy_stream(self, event: SseEvent, raw: bytes, response: web.StreamResponse,
                       exchange: _Exchange) -> tuple[_LegacyStream | None, bytes]:
        """The legacy SSE transport's first event names the URL to POST to: keep it on this proxy."""
        endpoint = event.data or ""
        if endpoint.startswith(self.upstream_origin):
            endpoint = endpoint[len(self.upstream_origin):] or "/"
            raw = replace_data(raw, endpoint)
        session_id = parse_qs(urlsplit(endpoint).query).get("session_id", [""])[0]
        if not session_id or len(self._legacy) >= MAX_SESSIONS:
            return None, raw
        legacy = _LegacyStream(session_id, response, exchange)
        exchange.methods = legacy.methods  # the answers to this session's POSTs arrive here
        self._legacy[session_id] = legacy
        return legacy, raw

    def _event(self, event: SseEvent, exchange: _Exchange) -> bytes:
        """One event as it goes on. Every event type is judged (a client might read any), but ``endpoint``."""
        raw = event.raw
        if event.data is None or event.event == "endpoint":
            return raw
        try:
            replacement = self._judge_text(event.data, exchange)
        except ValueError:
            return raw  # not JSON: not a message any client takes
        return raw if replacement is None else replace_data(raw, replacement)

    def _judge_text(self, text: str | bytes, exchange: _Exchange) -> str | None:
        """The JSON text to send instead of ``text`` (None: unchanged); ValueError when it is not JSON.

        Where an answer may bear interface, a key given twice is refused: parsers disagree on which
        one wins, so the proxy could judge one value and the client read the other."""
        strict = exchange.bears_interface or isinstance(exchange.methods, _Pending)
        try:
            message = json.loads(text, object_pairs_hook=_unique_keys if strict else None)
        except _DuplicateKeyError as duplicate:
            message = json.loads(text)
            if not (isinstance(message, dict) and "result" in message):
                return None  # a request or notification: not interface
            return json.dumps(self._unjudged(message.get("id"), f"an answer with the key {duplicate} twice"))
        replacement = self._filter(message, exchange)
        return None if replacement is None else json.dumps(replacement, ensure_ascii=False)

    def _filter(self, message: Any, exchange: _Exchange) -> Any | None:
        if not isinstance(message, dict):
            return None
        method = exchange.methods.get(_id_key(message.get("id")))
        if isinstance(exchange.methods, _Pending) and "method" not in message:
            exchange.methods.pop(_id_key(message.get("id")), None)  # answered: forget it
        return self.policy.filter_response(message, method, exchange.principal, exchange.client)

    async def _passthrough(self, request: web.Request, upstream: aiohttp.ClientResponse,
                           head: bytes = b"") -> web.StreamResponse:
        response = _response_like(upstream)
        await response.prepare(request)
        await response.write(head)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response

    def _refuse_unjudged(self, exchange: _Exchange, detail: str) -> web.Response:
        return _jsonrpc_response(self._unjudged(next(iter(exchange.methods), None), detail))

    def _unjudged(self, request_id: Any, detail: str) -> dict[str, Any]:
        """The error that answers what the proxy cannot check (counted)."""
        self.metrics.unjudged.inc()
        return {"jsonrpc": "2.0", "id": request_id,
                "error": {"code": REFUSED_CODE, "message": f"lockstep: refused {detail}: it cannot be checked"}}


async def _read_limited(upstream: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The body, and whether it is complete (False: the first ``limit``-plus bytes only)."""
    chunks, size = [], 0
    async for chunk in upstream.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), False
    return b"".join(chunks), True


def _response_like(upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    _copy_headers(upstream, response)
    return response


def _copy_headers(upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    for name, value in upstream.headers.items():
        if name.lower() not in _RESPONSE_DROPPED:
            response.headers.add(name, value)


class _DuplicateKeyError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise _DuplicateKeyError(repr(duplicate))
    return result


def _jsonrpc_response(message: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(message).encode(), content_type="application/json")


BATCH_REFUSAL = {"jsonrpc": "2.0", "id": None, "error": {
    "code": -32600, "message": "lockstep proxy: JSON-RPC batches are refused (MCP removed them in 2025-06-18); "
                               "send one message per request"}}


def _event_bytes(message: Any) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(message).encode() + b"\r\n\r\n"


def _id_key(request_id: Any) -> Any:
    return json.dumps(request_id) if isinstance(request_id, (dict, list)) else request_id


async def serve_proxy(app: ProxyApp, host: str, port: int, *, shutdown_timeout: float = 5.0) -> web.AppRunner:
    """Start serving on ``host:port``; return the runner (``await runner.cleanup()`` to stop).

    On stop, open streams (a GET stream, ``subscriptions/listen``) get ``shutdown_timeout``
    seconds before they are cut: clients reconnect, to this proxy or the next one."""
    runner = web.AppRunner(app.web_app(), handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
