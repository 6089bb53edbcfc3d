"""``lockstep proxy``: an MCP-aware reverse proxy that lets only approved interface reach clients.

Every request goes to the same path on the upstream origin, with its headers (``Host`` is the
client's on a loopback listener, so that the server's own DNS-rebinding check still sees it, with
the upstream's port where it names this listener; else the upstream's, or ``upstream_host``;
hop-by-hop headers are the connection's own). The listener
refuses a ``Host`` or ``Origin`` its :class:`~lockstep.proxy.listener.HostPolicy` does not allow.

Every successful answer is read the way the most lenient client in use reads it (the official
TypeScript SDK's: it takes a response for ANY of its pending ids from any body it parses, a JSON
array as a batch, and before 1.18 any Content-Type that merely *contains* ``application/json`` or
``text/event-stream``, two headers joined by fetch included), and every JSON-RPC response in it,
whatever its id, is judged by the :class:`~lockstep.proxy.policy.InterfacePolicy`:

- a POST answer whose Content-Type contains ``application/json`` is read whole (up to the
  limit), parsed (a batch array element by element), judged and re-serialised, and sent as
  ``application/json``: the client parses exactly what was judged;
- one whose Content-Type contains ``text/event-stream`` (the POST streams of streamable HTTP),
  and every GET answer (its GET stream, which the TypeScript client reads whatever its type, the
  legacy SSE transport's stream), is cut into events; an event is judged and flushed as soon as it
  is whole, and every other event, comment and priming event goes out as received;
- anything else, and every error status and 202, streams through untouched (no client parses
  it as a message; the 400/404/405 bodies clients detect protocol eras from stay as they were).

A compressed upstream body is decoded before it is judged (and sent on decoded, without
``Content-Encoding``). What cannot be judged fails closed: a JSON answer over the limit or that
does not parse is refused with a JSON-RPC error, on every exchange; an event over the limit or
nested too deep to parse ends its stream; an interface read answered as anything else is refused.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urljoin, urlsplit

import aiohttp
from aiohttp import web
from mcp_types import CLIENT_INFO_META_KEY
from opentelemetry import trace

from lockstep.core.gate import ComponentGate
from lockstep.proxy.listener import HostPolicy, is_loopback
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

__all__ = ["DEFAULT_MAX_BODY", "HOST_REFUSED_CODE", "ProxyApp", "ProxyConfigError", "UnjudgedError", "serve_proxy"]

logger = logging.getLogger("lockstep.proxy")
tracer = trace.get_tracer("lockstep.proxy")

DEFAULT_MAX_BODY = 16 * 1024 * 1024
#: Request headers that belong to one connection, not to the message (RFC 9110 7.6.1), and the
#: ones aiohttp computes for the body it sends.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length"})
_RESPONSE_DROPPED = _HOP_BY_HOP | {"content-encoding"}
#: JSON-RPC error of a request refused by Host or Origin (the code the MCP SDKs use for theirs).
HOST_REFUSED_CODE = -32000
#: Client names kept as metric labels; later ones are counted as "other".
MAX_CLIENT_LABELS = 20
#: Sessions remembered (their client name, or their legacy SSE stream).
MAX_SESSIONS = 10_000


class ProxyConfigError(ValueError):
    """An upstream URL the proxy cannot use."""


#: A legacy SSE endpoint URL: its path and its query parameters (in any order).
_EndpointKey = tuple[str, frozenset[tuple[str, str]]]


def _endpoint_key(url: str) -> _EndpointKey:
    parts = urlsplit(url)
    return unquote(parts.path) or "/", frozenset(parse_qsl(parts.query, keep_blank_values=True))


@dataclass
class _Exchange:
    """One HTTP request's JSON-RPC context: who asks, and which method each pending id is."""

    principal: str
    client: str
    methods: dict[Any, str]
    #: The URL this request was sent to, as a legacy SSE endpoint (its POSTs are answered on the GET stream).
    legacy_endpoint: _EndpointKey | None = None

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

    endpoint: _EndpointKey
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
                 max_body: int = DEFAULT_MAX_BODY, allowed_hosts: list[str] | None = None,
                 allowed_origins: list[str] | None = None, upstream_host: str | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ProxyConfigError(f"--upstream must be an http(s) URL such as http://127.0.0.1:8080/mcp, "
                                   f"not {upstream!r}")
        self.upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self._upstream_netloc = parts.netloc
        #: Lists given (None: the default of the listener, see :meth:`listening_on`).
        self._allowed = (allowed_hosts, allowed_origins)
        self.hosts = HostPolicy.of(allowed_hosts, allowed_origins)
        #: The Host sent upstream (None: the client's).
        self.upstream_host = upstream_host
        self._upstream_host_given = upstream_host is not None
        self._listen_port: int | None = None
        self.policy = InterfacePolicy(gate, mode, on_finding=self._found)
        self.metrics = metrics or ProxyMetrics()
        self.max_body = max_body
        self._on_finding = on_finding
        self._clients: dict[str, str] = {}  # session id -> client name (the 2025 handshake names it once)
        self._client_labels: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._legacy: dict[_EndpointKey, _LegacyStream] = {}

    def listening_on(self, host: str, port: int) -> None:
        """The listener's address decides the defaults: on loopback (a desktop) DNS-rebinding protection
        is on (the MCP SDKs' allowed names with this port) and the client's Host goes upstream; on any
        other address (the sidecar's, which clients reach by Service names and pod IPs) there is no
        check, and the upstream's own host:port goes upstream (a server bound to 127.0.0.1 with the
        SDK's protection refuses a Service name)."""
        self.hosts = HostPolicy.for_listener(host, port, *self._allowed)
        self._listen_port = port
        if not self._upstream_host_given:
            self.upstream_host = None if is_loopback(host) else self._upstream_netloc

    def _upstream_host_headers(self, request: web.Request) -> list[tuple[str, str]]:
        """``Host`` (and ``Origin``) as the upstream gets them. The client's, except that a loopback name
        with this listener's port (the client reached the proxy, as the server's own allow-list
        would have it reach the server) takes the upstream's port, in ``Host`` and in an ``Origin`` of
        the same host: a server that allows only its own port keeps working, and a foreign name still
        reaches the server's own check unchanged."""
        if self.upstream_host is not None:
            return [("Host", self.upstream_host)]
        host = request.headers.get("Host")
        if not host:
            return []
        name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
        if not name or not port.isdigit():
            name, port = host, ""
        upstream_port = urlsplit(self.upstream_origin).port
        if not is_loopback(name) or upstream_port is None or \
                (port or "80") != str(self._listen_port):
            return [("Host", host)]
        mapped = f"{name}:{upstream_port}"
        headers = [("Host", mapped)]
        origin = request.headers.get("Origin")
        for scheme in ("http", "https"):
            if origin is not None and origin.lower().rstrip("/") == f"{scheme}://{host}".lower():
                headers.append(("Origin", f"{scheme}://{mapped}"))
        return headers

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
        self.metrics.requests.labels(request.method).inc()
        refusal = self.hosts.refusal(request.headers.get("Host"), request.headers.get("Origin"))
        if refusal is not None:
            self.metrics.refused_hosts.inc()
            logger.warning(json.dumps({"event": "lockstep.refused", "reason": refusal,
                                       "method": request.method, "path": request.path}))
            return _jsonrpc_response({"jsonrpc": "2.0", "id": None, "error": {
                "code": HOST_REFUSED_CODE, "message": f"lockstep proxy: {refusal}"}}, status=403)
        body = await request.read()
        exchange, messages = self._exchange(request, body)
        legacy = self._legacy.get(exchange.legacy_endpoint) if exchange.legacy_endpoint else None
        if isinstance(messages, list):
            if legacy is not None:  # the legacy SSE transport answers on its GET stream, never in the POST
                await legacy.write(_event_bytes(BATCH_REFUSAL))
                return web.Response(status=202, text="Accepted")
            return _jsonrpc_response(BATCH_REFUSAL, status=400)
        decision = self.policy.decide_call(messages, exchange.principal, exchange.client)
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
        session_id = (request.headers.get("Mcp-Session-Id") or request.query.get("session_id")
                      or request.query.get("sessionId") or "")
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
        legacy = _endpoint_key(request.raw_path) if request.method == "POST" and self._legacy else None
        return _Exchange(principal, client, methods, legacy), messages

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
        replaced = self._upstream_host_headers(request)
        dropped = _HOP_BY_HOP | {name.lower() for name, _ in replaced}
        headers = [(name, value) for name, value in request.headers.items() if name.lower() not in dropped]
        headers += replaced
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
            content_types = upstream.headers.getall("Content-Type", [])
            route = _route(request.method, upstream.status, content_types, exchange)
            if route is _Route.EVENTS or route is _Route.EVENTS_NORMALISED:
                return await self._events(request, upstream, exchange, normalise=route is _Route.EVENTS_NORMALISED)
            if route is _Route.JSON:
                return await self._json(request, upstream, exchange)
            if route is _Route.REFUSE:
                joined = ", ".join(content_types).lower()
                return self._refuse_unjudged(exchange, f"an answer of Content-Type {joined[:60]!r}")
            return await self._passthrough(request, upstream)

    def forwarded(self, method: str, status: int, content_types: list[str], body: bytes,
                  exchange: _Exchange) -> tuple[int, list[str], bytes]:
        """(status, Content-Type values, body) the client gets for a whole upstream answer: the steps the
        streaming path takes, at once (for the differential fuzz targets; the legacy endpoint aside)."""
        route = _route(method, status, content_types, exchange)
        if route is _Route.PASS:
            return status, content_types, body
        if route is _Route.JSON:
            if len(body) <= self.max_body:
                try:
                    return status, ["application/json"], self.normalise_json(body, exchange)
                except UnjudgedError as error:
                    detail = str(error)
            else:
                detail = f"an answer larger than {self.max_body} bytes"
            refusal = self._unjudged(next(iter(exchange.methods), None), detail)
            return 200, ["application/json"], json.dumps(refusal).encode()
        if route is _Route.REFUSE:
            refusal = self._unjudged(next(iter(exchange.methods), None), "an answer of another Content-Type")
            return 200, ["application/json"], json.dumps(refusal).encode()
        sent_types = ["text/event-stream"] if route is _Route.EVENTS_NORMALISED else content_types
        splitter, out = EventSplitter(self.max_body), []
        try:
            for raw in splitter.feed(body):
                out.append(self._event(parse_event(raw), exchange))
            last, rest = splitter.finish()
            out += [self._event(parse_event(raw), exchange) for raw in last]
        except (EventTooLargeError, UnjudgedError):
            return status, sent_types, b"".join(out)  # the stream ends here
        return status, sent_types, b"".join(out) + rest

    async def _json(self, request: web.Request, upstream: aiohttp.ClientResponse,
                    exchange: _Exchange) -> web.StreamResponse:
        """The answer parsed, judged and re-serialised: what the client parses is what was judged."""
        body, complete = await _read_limited(upstream, self.max_body)
        if not complete:
            return self._refuse_unjudged(exchange, f"an answer larger than {self.max_body} bytes")
        try:
            body = self.normalise_json(body, exchange)
        except UnjudgedError as error:
            return self._refuse_unjudged(exchange, str(error))
        response = web.Response(status=upstream.status, reason=upstream.reason, body=body)
        _copy_headers(upstream, response, _RESPONSE_DROPPED | {"content-type"})
        response.headers["Content-Type"] = "application/json"
        return response

    def normalise_json(self, body: bytes, exchange: _Exchange) -> bytes:
        """A JSON answer body as the proxy sends it on: every message in it (one, or each element of an
        array) judged, then the whole re-serialised. UnjudgedError when it cannot be judged.

        The body is decoded as fetch's ``Response.json()`` decodes it (UTF-8, bad bytes replaced, a BOM
        dropped). Where an answer may bear interface, a key given twice is refused: parsers disagree on
        which one wins (elsewhere the re-serialised message has the one the proxy judged)."""
        text = body.decode("utf-8", "replace")
        if text.startswith("\ufeff"):
            text = text[1:]
        message = self._parse(text, exchange)
        if isinstance(message, list):
            judged: Any = [self._judged(item, exchange) for item in message]
        else:
            judged = self._judged(message, exchange)
        return _dumps(judged)

    def _parse(self, text: str, exchange: _Exchange) -> Any:
        strict = exchange.bears_interface or isinstance(exchange.methods, _Pending)
        try:
            return json.loads(text, object_pairs_hook=_unique_keys if strict else None)
        except _DuplicateKeyError as duplicate:
            raise UnjudgedError(f"an answer with the key {duplicate} twice") from None
        except RecursionError:
            raise UnjudgedError("an answer nested too deep to parse") from None
        except ValueError:
            raise UnjudgedError("an answer that is not JSON") from None

    def _judged(self, message: Any, exchange: _Exchange) -> Any:
        replacement = self._filter(message, exchange)
        return message if replacement is None else replacement

    async def _events(self, request: web.Request, upstream: aiohttp.ClientResponse,
                      exchange: _Exchange, normalise: bool = False) -> web.StreamResponse:
        response = _response_like(upstream)
        response.headers["X-Accel-Buffering"] = "no"
        if normalise:  # the proxy read it as an event stream: so will every client
            response.headers.popall("Content-Type", None)
            response.headers["Content-Type"] = "text/event-stream"
        await response.prepare(request)
        splitter = EventSplitter(self.max_body)
        legacy: _LegacyStream | None = None
        try:
            async for chunk in upstream.content.iter_any():
                for raw in splitter.feed(chunk):
                    event = parse_event(raw)
                    if event.event == "endpoint" and event.data and legacy is None:
                        legacy, raw = self._legacy_stream(request, event, raw, response, exchange)
                        await response.write(raw)
                        continue
                    await response.write(self._event(event, exchange))
        except (EventTooLargeError, UnjudgedError) as error:
            # The rest of this stream cannot be judged: end it (the client sees a dropped stream).
            logger.warning("closing an event stream from %s: %s", self.upstream_origin, error)
            self.metrics.unjudged.inc()
            return response
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as error:
            logger.info("the upstream stream ended: %s", error)
        finally:
            if legacy is not None:
                self._legacy.pop(legacy.endpoint, None)
        with contextlib.suppress(ConnectionError):
            last, rest = splitter.finish()
            try:
                for raw in last:
                    await response.write(self._event(parse_event(raw), exchange))
            except UnjudgedError:
                return response
            await response.write(rest)
            await response.write_eof()
        return response

    def _legacy_stream(self, request: web.Request, event: SseEvent, raw: bytes, response: web.StreamResponse,
                       exchange: _Exchange) -> tuple[_LegacyStream | None, bytes]:
        """The legacy SSE transport's first event names the URL to POST to: keep it on this proxy, and take
        it as the truth for which session a POST belongs to (the Python SDK says ``?session_id=``, the
        TypeScript SDK ``?sessionId=``; a server may say anything)."""
        endpoint = event.data or ""
        if endpoint.startswith(self.upstream_origin):
            endpoint = endpoint[len(self.upstream_origin):] or "/"
            raw = replace_data(raw, endpoint)
        if "://" in endpoint or endpoint.startswith("//") or len(self._legacy) >= MAX_SESSIONS:
            return None, raw  # POSTs go elsewhere: not through this proxy
        key = _endpoint_key(urljoin(request.path, endpoint))
        legacy = _LegacyStream(key, response, exchange)
        exchange.methods = legacy.methods  # the answers to this session's POSTs arrive here
        self._legacy[key] = legacy
        return legacy, raw

    def _event(self, event: SseEvent, exchange: _Exchange) -> bytes:
        """One event as it goes on. Every event type is judged (a client might read any), but ``endpoint``."""
        raw = event.raw
        if event.data is None or event.event == "endpoint":
            return raw
        try:
            replacement = self._judge_text(event.data, exchange)
        except RecursionError:
            # A client's parser may go deeper than the proxy's: what it cannot parse it cannot pass.
            raise UnjudgedError("an event nested too deep to parse") from None
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
            if isinstance(message, list) or (isinstance(message, dict) and "result" in message):
                request_id = message.get("id") if isinstance(message, dict) else None
                return json.dumps(self._unjudged(request_id, f"an answer with the key {duplicate} twice"))
            return None  # a request or notification: not interface
        if isinstance(message, list):  # no SDK takes a batch in an event; judged all the same
            judged = [self._judged(item, exchange) for item in message]
            changed = any(new is not old for new, old in zip(judged, message, strict=True))
            return _dumps(judged).decode() if changed else None
        replacement = self._filter(message, exchange)
        return None if replacement is None else _dumps(replacement).decode()

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


def _copy_headers(upstream: aiohttp.ClientResponse, response: web.StreamResponse,
                  dropped: frozenset[str] = _RESPONSE_DROPPED) -> None:
    for name, value in upstream.headers.items():
        if name.lower() not in dropped:
            response.headers.add(name, value)


class _Route(enum.Enum):
    PASS = "pass"
    JSON = "json"
    EVENTS = "events"
    EVENTS_NORMALISED = "events, with the Content-Type set"
    REFUSE = "refuse"


def _route(method: str, status: int, content_types: list[str], exchange: _Exchange) -> _Route:
    """How an upstream answer is relayed, decided as the most lenient client reads it."""
    if not 200 <= status < 300:
        return _Route.PASS  # no client parses these as messages
    if method == "GET":
        # The TypeScript client reads any ok GET answer (202 too) as events, whatever its type.
        return _Route.EVENTS
    if status == 202:
        return _Route.PASS  # a POST's 202 has no message for any client
    # fetch joins repeated headers with ", ", and the TypeScript SDK before 1.18 tests for a substring.
    joined = ", ".join(content_types).lower()
    if "text/event-stream" in joined:
        exact = len(content_types) == 1 and _essence(content_types[0]) == "text/event-stream"
        return _Route.EVENTS if exact else _Route.EVENTS_NORMALISED
    if "application/json" in joined:
        return _Route.JSON
    if exchange.asks_interface and status == 200:
        return _Route.REFUSE  # an interface read answered as something the proxy does not judge
    return _Route.PASS


class _DuplicateKeyError(ValueError):
    pass


class UnjudgedError(ValueError):
    """An answer the proxy cannot judge (not JSON, nested too deep, a key given twice): it is refused."""


def _essence(content_type: str) -> str:
    """A Content-Type's media type, lowercased, without parameters."""
    return content_type.split(";", 1)[0].strip().lower()


def _dumps(message: Any) -> bytes:
    """JSON text in UTF-8; a lone surrogate (which UTF-8 cannot carry) is written as an escape."""
    try:
        return json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(message).encode()


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
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = port or int(runner.addresses[0][1])
    app.listening_on(host, bound)
    return runner
