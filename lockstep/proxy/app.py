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
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp import web
from opentelemetry import trace

from lockstep.core.gate import ComponentGate
from lockstep.proxy import jsonrpc
from lockstep.proxy.answers import AnswerJudge, Route, UnjudgedError, route
from lockstep.proxy.exchange import EndpointKey, Exchange, LegacyStream, endpoint_key
from lockstep.proxy.http_relay import (
    HOP_BY_HOP,
    RESPONSE_DROPPED,
    Isolated,
    Live,
    closing,
    copy_headers,
    isolation_reason,
    jsonrpc_response,
    read_body,
    read_limited,
    response_like,
)
from lockstep.proxy.jsonrpc import BATCH_REFUSAL, HOST_REFUSED_CODE
from lockstep.proxy.limits import DEFAULT_CONNECTIONS_PER_SOURCE, DEFAULT_HEADER_TIMEOUT, ConnectionGuard
from lockstep.proxy.clients import ClientNames
from lockstep.proxy.listener import HostPolicy, is_loopback, upstream_host_headers
from lockstep.proxy.metrics import ProxyMetrics
from lockstep.proxy.serving import ProxyBindError, serve_proxy
from lockstep.proxy.policy import CallDecision, Finding, InterfacePolicy, Mode, principal_of
from lockstep.proxy.sse import EventSplitter, EventTooLargeError, SseEvent, parse_event, replace_data

# Serving it (serve_proxy, ProxyBindError) is lockstep.proxy.serving's, importable from here too; the HTTP side of
# one relayed answer lockstep.proxy.http_relay's.
__all__ = ["DEFAULT_MAX_BODY", "HOST_REFUSED_CODE", "ProxyApp", "ProxyBindError", "ProxyConfigError", "UnjudgedError",
           "serve_proxy"]

logger = logging.getLogger("lockstep.proxy")
tracer = trace.get_tracer("lockstep.proxy")

DEFAULT_MAX_BODY = 16 * 1024 * 1024
#: Sessions remembered (their client name, or their legacy SSE stream).
MAX_SESSIONS = 10_000
#: Seconds a request body may take to arrive once its headers have.
DEFAULT_BODY_TIMEOUT = 30.0
#: A body this small is read to answer an isolated request with its id; a larger one is not read at all.
ISOLATED_READ_LIMIT = 64 * 1024
#: Seconds a stream has, once the pod is isolated, to end itself (refusals for its pending requests) before its
#: connection is cut: a client that does not read would otherwise hold it open.
ISOLATION_GRACE = 1.0


class ProxyConfigError(ValueError):
    """An upstream URL the proxy cannot use."""


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
        self.clients = ClientNames(MAX_SESSIONS)
        self._session: aiohttp.ClientSession | None = None
        self._legacy: dict[EndpointKey, LegacyStream] = {}
        self.body_timeout = body_timeout
        #: Open connections per source and the first request's header deadline (installed by serve_proxy).
        self.guard = ConnectionGuard(connections_per_source, header_timeout)
        #: Enforcement Isolate, once the pod's verdict is not True: why (see :meth:`isolate`); None: requests pass.
        self._isolated: str | None = None
        #: Every upstream answer being relayed now (cut at isolation).
        self._live: set[Live] = set()

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

    def _abort_left(self, live: list[Live]) -> None:
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

    def _found(self, finding: Finding) -> None:
        self.metrics.finding(finding, self.clients.label(finding.client))
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
            refused = jsonrpc_response(jsonrpc.error(None, HOST_REFUSED_CODE, f"lockstep proxy: {refusal}"), status=403)
            return closing(refused) if request.body_exists else refused
        if self._isolated is not None:  # before the body is read: an isolated pod spends nothing on it
            return await self._refuse_isolated(request)
        try:
            body = await read_body(request, self.body_timeout)
        except TimeoutError:
            return closing(web.Response(status=408, text="lockstep proxy: the request body was too slow\n"))
        if self._isolated is not None:
            return self._isolated_response(body)
        exchange, messages = self._exchange(request, body)
        legacy = self._legacy.get(exchange.legacy_endpoint) if exchange.legacy_endpoint else None
        if isinstance(messages, list):
            if legacy is not None:  # the legacy SSE transport answers on its GET stream, never in the POST
                await legacy.write(jsonrpc.event_bytes(BATCH_REFUSAL))
                return web.Response(status=202, text="Accepted")
            return jsonrpc_response(BATCH_REFUSAL, status=400)
        decision = self.policy.decide_call(messages, exchange.principal, exchange.client)
        if decision is not None and decision.error is not None:
            self.metrics.calls.labels("refused").inc()
            if legacy is not None:  # the legacy SSE transport answers on its GET stream, never in the POST
                await legacy.write(jsonrpc.event_bytes(decision.error))
                return web.Response(status=202, text="Accepted")
            return jsonrpc_response(decision.error)
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
        client = self.clients.of(messages, session_id)
        methods: dict[Any, str] = {}
        for message in messages if isinstance(messages, list) else [messages]:
            if isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message:
                methods[jsonrpc.id_key(message["id"])] = message["method"]
        legacy = endpoint_key(request.raw_path) if request.method == "POST" and self._legacy else None
        return Exchange(principal, client, methods, legacy), messages

    # ------------------------------------------------------------ responses

    async def _forward(self, request: web.Request, body: bytes, exchange: Exchange) -> web.StreamResponse:
        assert self._session is not None, "the proxy's client session is not open"
        replaced = upstream_host_headers(request.headers, self.upstream_host, self.upstream_origin, self._listen_port)
        dropped = HOP_BY_HOP | {name.lower() for name, _ in replaced}
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
        live = Live(request, upstream, exchange)
        self._live.add(live)
        try:
            async with upstream:
                if self._isolated is not None:  # isolated while the server answered: nothing of it goes out
                    return self._isolated_response(body)
                self.metrics.upstream_seconds.observe(time.perf_counter() - started)
                self.clients.remember(upstream.headers.get("Mcp-Session-Id"), exchange.client)
                return await self._relay(request, body, live)
        finally:
            self._live.discard(live)

    async def _relay(self, request: web.Request, body: bytes, live: Live) -> web.StreamResponse:
        upstream, exchange = live.upstream, live.exchange
        content_types = upstream.headers.getall("Content-Type", [])
        relay = route(request.method, upstream.status, content_types, exchange)
        if relay is Route.EVENTS or relay is Route.EVENTS_NORMALISED:
            return await self._events(request, live, normalise=relay is Route.EVENTS_NORMALISED)
        if relay is Route.JSON:
            try:
                return await self._json(request, upstream, exchange)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, Isolated):
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
        body, complete = await read_limited(upstream, self.max_body)
        if self._isolated is not None:
            raise Isolated()
        if not complete:
            return self._refuse_unjudged(exchange, f"an answer larger than {self.max_body} bytes")
        try:
            body = self.answers.normalise_json(body, exchange)
        except UnjudgedError as error:
            return self._refuse_unjudged(exchange, str(error))
        response = web.Response(status=upstream.status, reason=upstream.reason, body=body)
        copy_headers(upstream, response, RESPONSE_DROPPED | {"content-type"})
        response.headers["Content-Type"] = "application/json"
        return response

    def normalise_json(self, body: bytes, exchange: Exchange) -> bytes:
        """A JSON answer body as the proxy sends it on (see :meth:`AnswerJudge.normalise_json`)."""
        return self.answers.normalise_json(body, exchange)

    async def _events(self, request: web.Request, live: Live, normalise: bool = False) -> web.StreamResponse:
        upstream, exchange = live.upstream, live.exchange
        response = live.response = response_like(upstream)
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
        except Isolated:
            pass
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as error:
            logger.info("the upstream stream ended: %s", error)
        finally:
            if legacy is not None:
                self._legacy.pop(legacy.endpoint, None)
        if self._isolated is not None:
            return await self._end_isolated(response, exchange)
        with contextlib.suppress(ConnectionError, Isolated):
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
            raise Isolated()
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

    async def _passthrough(self, request: web.Request, live: Live) -> web.StreamResponse:
        response = live.response = response_like(live.upstream)
        await response.prepare(request)
        with contextlib.suppress(Isolated, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            async for chunk in live.upstream.content.iter_any():
                await self._send(response, chunk)
            await response.write_eof()
        return response

    async def _refuse_isolated(self, request: web.Request) -> web.Response:
        """A request that arrives while the pod is isolated: its body is read only when it is small (to answer
        with its id), within the body deadline; a larger one is not read, and its connection closes."""
        length = request.content_length
        if request.body_exists and (length is None or length > ISOLATED_READ_LIMIT):
            return closing(self._isolated_response(b""))
        try:
            body = await read_body(request, self.body_timeout)
        except TimeoutError:
            return closing(self._isolated_response(b""))
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
        return jsonrpc_response(jsonrpc.isolated(request_id, self._isolated or ""), status=503)

    def _refuse_unjudged(self, exchange: Exchange, detail: str) -> web.Response:
        return jsonrpc_response(self.answers.refusal(exchange, detail))
