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

This module is the HTTP side (routes, forwarding, streaming, legacy SSE sessions). How an answer is read
and judged is :mod:`lockstep.proxy.answers`; a request's JSON-RPC context :mod:`lockstep.proxy.exchange`;
every JSON-RPC error the proxy writes :mod:`lockstep.proxy.jsonrpc`; what is withheld
:mod:`lockstep.proxy.policy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp import web
from mcp_types import CLIENT_INFO_META_KEY
from opentelemetry import trace

from lockstep.core.gate import ComponentGate
from lockstep.proxy import jsonrpc
from lockstep.proxy.answers import AnswerJudge, Route, UnjudgedError, route
from lockstep.proxy.exchange import EndpointKey, Exchange, LegacyStream, endpoint_key
from lockstep.proxy.jsonrpc import BATCH_REFUSAL, HOST_REFUSED_CODE
from lockstep.proxy.limits import DEFAULT_CONNECTIONS_PER_SOURCE, DEFAULT_HEADER_TIMEOUT, ConnectionGuard
from lockstep.proxy.listener import HostPolicy, is_loopback
from lockstep.proxy.metrics import ProxyMetrics
from lockstep.proxy.policy import CallDecision, Finding, InterfacePolicy, Mode, principal_of
from lockstep.proxy.sse import EventSplitter, EventTooLargeError, SseEvent, parse_event, replace_data

__all__ = ["DEFAULT_MAX_BODY", "HOST_REFUSED_CODE", "ProxyApp", "ProxyBindError", "ProxyConfigError", "UnjudgedError",
           "serve_proxy"]

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
#: Seconds a request body may take to arrive once its headers have.
DEFAULT_BODY_TIMEOUT = 30.0
#: Seconds an unread request body (an isolated pod's, a refused Host's) is discarded for before the connection
#: closes (aiohttp's default is 10): the client gets its answer, and spends little of the proxy's time.
LINGERING_TIME = 1.0
#: A body this small is read to answer an isolated request with its id; a larger one is not read at all.
ISOLATED_READ_LIMIT = 64 * 1024
#: Seconds a stream has, once the pod is isolated, to end itself (refusals for its pending requests) before its
#: connection is cut: a client that does not read would otherwise hold it open.
ISOLATION_GRACE = 1.0
#: The reason shown to agents: a word of the operator's reason vocabulary (``InterfaceChanged``), never text
#: the server chose (a verdict message names drift findings by the server's tool names).
_REASON = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")


class ProxyConfigError(ValueError):
    """An upstream URL the proxy cannot use."""


class ProxyBindError(OSError):
    """The proxy could not listen on one of the address families the host has: something else holds its
    port there (the application, answering agents past the proxy)."""


class _Isolated(Exception):
    """The pod was isolated while an answer was being relayed: nothing more of it goes out."""


@dataclass(eq=False)
class _Live:
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


#: The names this module had before the exchange and the judging of answers moved out (the fuzz targets
#: build an _Exchange).
_Exchange = Exchange
_EndpointKey = EndpointKey


class ProxyApp:
    """The proxy's request handler, bound to one upstream MCP server."""

    def __init__(self, upstream: str, gate: ComponentGate, mode: Mode = Mode.QUARANTINE, *,
                 on_finding: Callable[[Finding], None] | None = None, metrics: ProxyMetrics | None = None,
                 max_body: int = DEFAULT_MAX_BODY, allowed_hosts: list[str] | None = None,
                 allowed_origins: list[str] | None = None, upstream_host: str | None = None,
                 body_timeout: float = DEFAULT_BODY_TIMEOUT,
                 connections_per_source: int = DEFAULT_CONNECTIONS_PER_SOURCE,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> None:
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
        #: Judges every answer; the policy, the metrics and the body limit are its.
        self.answers = AnswerJudge(InterfacePolicy(gate, mode, on_finding=self._found), metrics or ProxyMetrics(),
                                   max_body)
        self._on_finding = on_finding
        self._clients: dict[str, str] = {}  # session id -> client name (the 2025 handshake names it once)
        self._client_labels: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._legacy: dict[EndpointKey, LegacyStream] = {}
        self.body_timeout = body_timeout
        #: Open connections per source and the first request's header deadline (installed by serve_proxy).
        self.guard = ConnectionGuard(connections_per_source, header_timeout)
        #: Enforcement Isolate, once the pod's verdict is not True: why (see :meth:`isolate`); None: requests pass.
        self._isolated: str | None = None
        #: Every upstream answer being relayed now (cut at isolation).
        self._live: set[_Live] = set()

    @property
    def isolated(self) -> str | None:
        """Why the pod is isolated (a reason word), or None."""
        return self._isolated

    @isolated.setter
    def isolated(self, reason: str | None) -> None:
        if reason is None:
            self.release()
        else:
            self.isolate(reason)

    def isolate(self, reason: str) -> None:
        """From now on every request is refused (HTTP 503 and a JSON-RPC error, on every session, open or new),
        and nothing more of any answer being relayed goes out: each open stream (a GET stream, a POST's event
        stream, a legacy SSE stream) answers its pending requests with the same refusal and ends; one that has
        not ended within ISOLATION_GRACE seconds is cut. ``reason`` is shown to agents as one word (see
        :func:`isolation_reason`)."""
        was, self._isolated = self._isolated, isolation_reason(reason)
        self.policy.isolated = self._isolated  # the policy refuses every server message too (defence in depth)
        if was is not None:
            return
        live = list(self._live)
        for entry in live:
            entry.cut()
        if live:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing can be streaming
                asyncio.get_running_loop().call_later(ISOLATION_GRACE, self._abort_left, live)

    def release(self) -> None:
        """Requests pass again (the pod's verdict is True)."""
        self._isolated = None
        self.policy.isolated = None

    def _abort_left(self, live: list[_Live]) -> None:
        for entry in live:
            if entry in self._live:
                entry.abort()

    @property
    def listen_port(self) -> int | None:
        """The port it serves on (None: not serving)."""
        return self._listen_port

    @property
    def relaying(self) -> int:
        """Upstream answers being relayed now."""
        return len(self._live)

    @property
    def policy(self) -> InterfacePolicy:
        return self.answers.policy

    @property
    def metrics(self) -> ProxyMetrics:
        return self.answers.metrics

    @property
    def max_body(self) -> int:
        return self.answers.max_body

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
        self.guard.headers_arrived(request.transport)
        self.metrics.requests.labels(request.method).inc()
        refusal = self.hosts.refusal(request.headers.get("Host"), request.headers.get("Origin"))
        if refusal is not None:
            self.metrics.refused_hosts.inc()
            logger.warning(json.dumps({"event": "lockstep.refused", "reason": refusal,
                                       "method": request.method, "path": request.path}))
            refused = _jsonrpc_response(jsonrpc.error(None, HOST_REFUSED_CODE, f"lockstep proxy: {refusal}"), status=403)
            return _closing(refused) if request.body_exists else refused
        if self._isolated is not None:  # before the body is read: an isolated pod spends nothing on it
            return await self._refuse_isolated(request)
        try:
            body = await _read_body(request, self.body_timeout)
        except TimeoutError:
            return _closing(web.Response(status=408, text="lockstep proxy: the request body was too slow\n"))
        if self._isolated is not None:
            return self._isolated_response(body)
        exchange, messages = self._exchange(request, body)
        legacy = self._legacy.get(exchange.legacy_endpoint) if exchange.legacy_endpoint else None
        if isinstance(messages, list):
            if legacy is not None:  # the legacy SSE transport answers on its GET stream, never in the POST
                await legacy.write(jsonrpc.event_bytes(BATCH_REFUSAL))
                return web.Response(status=202, text="Accepted")
            return _jsonrpc_response(BATCH_REFUSAL, status=400)
        decision = self.policy.decide_call(messages, exchange.principal, exchange.client)
        if decision is not None and decision.error is not None:
            self.metrics.calls.labels("refused").inc()
            if legacy is not None:  # the legacy SSE transport answers on its GET stream, never in the POST
                await legacy.write(jsonrpc.event_bytes(decision.error))
                return web.Response(status=202, text="Accepted")
            return _jsonrpc_response(decision.error)
        if legacy is not None:
            legacy.expect(exchange)
        if decision is not None:
            return await self._forward_call(request, body, exchange, decision, messages)
        return await self._forward(request, body, exchange)

    async def _forward_call(self, request: web.Request, body: bytes, exchange: Exchange,
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

    def _exchange(self, request: web.Request, body: bytes) -> tuple[Exchange, Any]:
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
                methods[jsonrpc.id_key(message["id"])] = message["method"]
        legacy = endpoint_key(request.raw_path) if request.method == "POST" and self._legacy else None
        return Exchange(principal, client, methods, legacy), messages

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

    async def _forward(self, request: web.Request, body: bytes, exchange: Exchange) -> web.StreamResponse:
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
        live = _Live(request, upstream, exchange)
        self._live.add(live)
        try:
            async with upstream:
                if self._isolated is not None:  # isolated while the server answered: nothing of it goes out
                    return self._isolated_response(body)
                self.metrics.upstream_seconds.observe(time.perf_counter() - started)
                self._remember_client(upstream.headers.get("Mcp-Session-Id"), exchange.client)
                return await self._relay(request, body, live)
        finally:
            self._live.discard(live)

    async def _relay(self, request: web.Request, body: bytes, live: _Live) -> web.StreamResponse:
        upstream, exchange = live.upstream, live.exchange
        content_types = upstream.headers.getall("Content-Type", [])
        relay = route(request.method, upstream.status, content_types, exchange)
        if relay is Route.EVENTS or relay is Route.EVENTS_NORMALISED:
            return await self._events(request, live, normalise=relay is Route.EVENTS_NORMALISED)
        if relay is Route.JSON:
            try:
                return await self._json(request, upstream, exchange)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, _Isolated):
                if self._isolated is None:
                    raise
                return self._isolated_response(body)
        if relay is Route.REFUSE:
            # The type is the server's choice: not echoed to the agent (S6-14).
            return self._refuse_unjudged(exchange, "an answer of a Content-Type no client reads as MCP")
        return await self._passthrough(request, live)

    def forwarded(self, method: str, status: int, content_types: list[str], body: bytes,
                  exchange: Exchange) -> tuple[int, list[str], bytes]:
        """(status, Content-Type values, body) the client gets for a whole upstream answer (see
        :meth:`AnswerJudge.forwarded`)."""
        return self.answers.forwarded(method, status, content_types, body, exchange)

    async def _json(self, request: web.Request, upstream: aiohttp.ClientResponse,
                    exchange: Exchange) -> web.StreamResponse:
        """The answer parsed, judged and re-serialised: what the client parses is what was judged."""
        body, complete = await _read_limited(upstream, self.max_body)
        if self._isolated is not None:
            raise _Isolated()
        if not complete:
            return self._refuse_unjudged(exchange, f"an answer larger than {self.max_body} bytes")
        try:
            body = self.answers.normalise_json(body, exchange)
        except UnjudgedError as error:
            return self._refuse_unjudged(exchange, str(error))
        response = web.Response(status=upstream.status, reason=upstream.reason, body=body)
        _copy_headers(upstream, response, _RESPONSE_DROPPED | {"content-type"})
        response.headers["Content-Type"] = "application/json"
        return response

    def normalise_json(self, body: bytes, exchange: Exchange) -> bytes:
        """A JSON answer body as the proxy sends it on (see :meth:`AnswerJudge.normalise_json`)."""
        return self.answers.normalise_json(body, exchange)

    async def _events(self, request: web.Request, live: _Live, normalise: bool = False) -> web.StreamResponse:
        upstream, exchange = live.upstream, live.exchange
        response = live.response = _response_like(upstream)
        response.headers["X-Accel-Buffering"] = "no"
        if normalise:  # the proxy read it as an event stream: so will every client
            response.headers.popall("Content-Type", None)
            response.headers["Content-Type"] = "text/event-stream"
        await response.prepare(request)
        splitter = EventSplitter(self.max_body)
        legacy: LegacyStream | None = None
        try:
            async for chunk in upstream.content.iter_any():
                for raw in splitter.feed(chunk):
                    event = parse_event(raw)
                    if event.event == "endpoint" and event.data and legacy is None:
                        legacy, raw = self._legacy_stream(request, event, raw, response, exchange)
                        await self._send(response, raw)
                        continue
                    out = self.answers.event(event, exchange)
                    await self._send(response, out)
        except (EventTooLargeError, UnjudgedError) as error:
            # The rest of this stream cannot be judged: end it (the client sees a dropped stream).
            logger.warning("closing an event stream from %s: %s", self.upstream_origin, error)
            self.metrics.unjudged.inc()
            return response
        except _Isolated:
            pass
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as error:
            logger.info("the upstream stream ended: %s", error)
        finally:
            if legacy is not None:
                self._legacy.pop(legacy.endpoint, None)
        if self._isolated is not None:
            return await self._end_isolated(response, exchange)
        with contextlib.suppress(ConnectionError, _Isolated):
            last, rest = splitter.finish()
            try:
                for raw in last:
                    await self._send(response, self.answers.event(parse_event(raw), exchange))
            except UnjudgedError:
                return response
            await self._send(response, rest)
            await response.write_eof()
        return response

    async def _send(self, response: web.StreamResponse, data: bytes) -> None:
        """Write relayed bytes, unless the pod is isolated (checked on every event, not once per request)."""
        if self._isolated is not None:
            raise _Isolated()
        await response.write(data)

    async def _end_isolated(self, response: web.StreamResponse, exchange: Exchange) -> web.StreamResponse:
        """An event stream at isolation: each request still waiting for its answer here (a POST's, or a legacy
        session's) gets the isolation refusal instead, and the stream ends."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            for request_id in list(exchange.methods):
                await response.write(jsonrpc.event_bytes(jsonrpc.isolated(request_id, self._isolated or "")))
            await response.write_eof()
        return response

    def _legacy_stream(self, request: web.Request, event: SseEvent, raw: bytes, response: web.StreamResponse,
                       exchange: Exchange) -> tuple[LegacyStream | None, bytes]:
        """The legacy SSE transport's first event names the URL to POST to: keep it on this proxy, and take
        it as the truth for which session a POST belongs to (the Python SDK says ``?session_id=``, the
        TypeScript SDK ``?sessionId=``; a server may say anything)."""
        endpoint = event.data or ""
        if endpoint.startswith(self.upstream_origin):
            endpoint = endpoint[len(self.upstream_origin):] or "/"
            raw = replace_data(raw, endpoint)
        if "://" in endpoint or endpoint.startswith("//") or len(self._legacy) >= MAX_SESSIONS:
            return None, raw  # POSTs go elsewhere: not through this proxy
        key = endpoint_key(urljoin(request.path, endpoint))
        legacy = LegacyStream(key, response, exchange)
        exchange.answer_posts(legacy.methods)  # the answers to this session's POSTs arrive here
        self._legacy[key] = legacy
        return legacy, raw

    async def _passthrough(self, request: web.Request, live: _Live) -> web.StreamResponse:
        response = live.response = _response_like(live.upstream)
        await response.prepare(request)
        with contextlib.suppress(_Isolated, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            async for chunk in live.upstream.content.iter_any():
                await self._send(response, chunk)
            await response.write_eof()
        return response

    async def _refuse_isolated(self, request: web.Request) -> web.Response:
        """A request that arrives while the pod is isolated: its body is read only when it is small (to answer
        with its id), within the body deadline; a larger one is not read, and its connection closes."""
        length = request.content_length
        if request.body_exists and (length is None or length > ISOLATED_READ_LIMIT):
            return _closing(self._isolated_response(b""))
        try:
            body = await _read_body(request, self.body_timeout)
        except TimeoutError:
            return _closing(self._isolated_response(b""))
        return self._isolated_response(body)

    def _isolated_response(self, body: bytes) -> web.Response:
        """Every request while the pod is isolated: HTTP 503 with a JSON-RPC error (the request's id when it has
        one) that names the reason word only; nothing reaches the server."""
        self.metrics.isolated.inc()
        request_id = None
        try:
            message = json.loads(body) if body else None
        except ValueError:
            message = None
        if isinstance(message, dict):
            request_id = message.get("id")
        return _jsonrpc_response(jsonrpc.isolated(request_id, self._isolated or ""), status=503)

    def _refuse_unjudged(self, exchange: Exchange, detail: str) -> web.Response:
        return _jsonrpc_response(self.answers.refusal(exchange, detail))


async def _read_body(request: web.Request, timeout: float) -> bytes:
    """The request body (up to the app's limit), within ``timeout`` seconds (TimeoutError)."""
    if request.content.is_eof():  # all here already: no deadline to arm
        return await request.read()
    async with asyncio.timeout(timeout):
        return await request.read()


def _closing(response: web.Response) -> web.Response:
    response.force_close()  # a body the proxy did not read (whole) must not be taken for the next request
    return response


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


def _jsonrpc_response(message: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(message).encode(), content_type="application/json")


async def serve_proxy(app: ProxyApp, host: str, port: int, *, shutdown_timeout: float = 5.0) -> web.AppRunner:
    """Start serving on ``host:port``; return the runner (``await runner.cleanup()`` to stop).

    A wildcard ``host`` ("0.0.0.0", "::" or "") listens on both address families, on a socket each; if the
    port cannot be had on a family this host has (the application took it there first), ProxyBindError:
    agents on that family would reach the application instead.

    On stop, open streams (a GET stream, ``subscriptions/listen``) get ``shutdown_timeout``
    seconds before they are cut: clients reconnect, to this proxy or the next one."""
    runner = web.AppRunner(app.web_app(), handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout,
                           lingering_time=LINGERING_TIME)
    await runner.setup()
    assert runner.server is not None
    app.guard.install(runner.server)
    try:
        if host in WILDCARDS:
            for sock in wildcard_sockets(port):
                await web.SockSite(runner, sock).start()
        else:
            await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = port or int(runner.addresses[0][1])
    app.listening_on(host, bound)
    return runner


#: Listen addresses that mean "every address of this pod".
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def wildcard_sockets(port: int) -> list[socket.socket]:
    """Listening sockets on ``port`` (0: one free port for both) for every address of each family the host has:
    ``0.0.0.0`` and ``[::]`` (IPv6 only, so that the two never overlap). A family the kernel lacks is
    skipped; a port taken on a family it has raises ProxyBindError."""
    sockets: list[socket.socket] = []
    try:
        for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            sock = _listening(family, address, port)
            if sock is not None:
                sockets.append(sock)
                port = port or sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise ProxyBindError(errno.EAFNOSUPPORT, f"no address family to listen on port {port}")
    return sockets


def _listening(family: socket.AddressFamily, address: str, port: int) -> socket.socket | None:
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        if error.errno in (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT):
            return None  # the kernel has no such family
        raise
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as error:
        sock.close()
        if family == socket.AF_INET6 and error.errno == errno.EADDRNOTAVAIL:
            return None  # IPv6 is disabled in this pod
        raise ProxyBindError(error.errno, f"cannot listen on [{address}]:{port}: {error.strerror}; something else "
                                          f"holds the port there") from None
    return sock
