"""How the proxy reads an upstream answer, as the most lenient client in use reads it, and judges every
JSON-RPC response in it (the policy decides what is withheld; what cannot be judged is refused here:
fail closed). No I/O: :mod:`lockstep.proxy.app` streams the bytes in and out.

* :func:`route`: whether an answer is read whole as JSON, cut into events, passed or refused, from its
  method, status and Content-Type values;
* :class:`AnswerJudge`: a JSON body (:meth:`~AnswerJudge.normalise_json`), one event
  (:meth:`~AnswerJudge.event`) or a whole answer at once (:meth:`~AnswerJudge.forwarded`) as the client
  gets it.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from lockstep.proxy import jsonrpc
from lockstep.proxy.exchange import Exchange
from lockstep.proxy.messages import MessageClass, classify
from lockstep.proxy.metrics import ProxyMetrics
from lockstep.proxy.policy import InterfacePolicy
from lockstep.proxy.sse import EventSplitter, EventTooLargeError, SseEvent, parse_event, replace_data

__all__ = ["AnswerJudge", "Route", "UnjudgedError", "route"]


class UnjudgedError(ValueError):
    """An answer the proxy cannot judge (not JSON, nested too deep, a key given twice): it is refused."""


class Route(enum.Enum):
    PASS = "pass"
    JSON = "json"
    EVENTS = "events"
    EVENTS_NORMALISED = "events, with the Content-Type set"
    REFUSE = "refuse"


def route(method: str, status: int, content_types: list[str], exchange: Exchange) -> Route:
    """How an upstream answer is relayed, decided as the most lenient client reads it."""
    if not 200 <= status < 300:
        return Route.PASS  # no client parses these as messages
    if method == "GET":
        # The TypeScript client reads any ok GET answer (202 too) as events, whatever its type.
        return Route.EVENTS
    if status == 202:
        return Route.PASS  # a POST's 202 has no message for any client
    # fetch joins repeated headers with ", ", and the TypeScript SDK before 1.18 tests for a substring.
    joined = ", ".join(content_types).lower()
    if "text/event-stream" in joined:
        exact = len(content_types) == 1 and _essence(content_types[0]) == "text/event-stream"
        return Route.EVENTS if exact else Route.EVENTS_NORMALISED
    if "application/json" in joined:
        return Route.JSON
    if exchange.asks_interface and status == 200:
        return Route.REFUSE  # an interface read answered as something the proxy does not judge
    return Route.PASS


def _essence(content_type: str) -> str:
    """A Content-Type's media type, lowercased, without parameters."""
    return content_type.split(";", 1)[0].strip().lower()


class AnswerJudge:
    """Judges upstream answers with ``policy``; counts what it cannot judge in ``metrics``."""

    def __init__(self, policy: InterfacePolicy, metrics: ProxyMetrics, max_body: int) -> None:
        self.policy, self.metrics, self.max_body = policy, metrics, max_body

    def forwarded(self, method: str, status: int, content_types: list[str], body: bytes,
                  exchange: Exchange) -> tuple[int, list[str], bytes]:
        """(status, Content-Type values, body) the client gets for a whole upstream answer: the steps the
        streaming path takes, at once (for the differential fuzz targets; the legacy endpoint aside)."""
        relay = route(method, status, content_types, exchange)
        if relay is Route.PASS:
            return status, content_types, body
        if relay is Route.JSON:
            if len(body) <= self.max_body:
                try:
                    return status, ["application/json"], self.normalise_json(body, exchange)
                except UnjudgedError as error:
                    detail = str(error)
            else:
                detail = f"an answer larger than {self.max_body} bytes"
            return 200, ["application/json"], json.dumps(self.refusal(exchange, detail)).encode()
        if relay is Route.REFUSE:
            refusal = self.refusal(exchange, "an answer of another Content-Type")
            return 200, ["application/json"], json.dumps(refusal).encode()
        sent_types = ["text/event-stream"] if relay is Route.EVENTS_NORMALISED else content_types
        splitter, out = EventSplitter(self.max_body), []
        try:
            for raw in splitter.feed(body):
                out.append(self.event(parse_event(raw), exchange))
            last, rest = splitter.finish()
            out += [self.event(parse_event(raw), exchange) for raw in last]
        except (EventTooLargeError, UnjudgedError):
            return status, sent_types, b"".join(out)  # the stream ends here
        return status, sent_types, b"".join(out) + rest

    def normalise_json(self, body: bytes, exchange: Exchange) -> bytes:
        """A JSON answer body as the proxy sends it on: every message in it (one, or each element of an
        array) judged, then the whole re-serialised. UnjudgedError when it cannot be judged.

        The body is decoded as fetch's ``Response.json()`` decodes it (UTF-8, bad bytes replaced, a BOM
        dropped). Where an answer may bear interface, a key given twice is refused: parsers disagree on
        which one wins (elsewhere the re-serialised message has the one the proxy judged)."""
        text = body.decode("utf-8", "replace")
        text = text.removeprefix("\ufeff")
        message = self._parse(text, exchange)
        if isinstance(message, list):
            judged: Any = [self._judged(item, exchange) for item in message]
        else:
            judged = self._judged(message, exchange)
        return jsonrpc.dumps(judged)

    def _parse(self, text: str, exchange: Exchange) -> Any:
        try:
            return json.loads(text, object_pairs_hook=jsonrpc.unique_keys if exchange.strict else None)
        except jsonrpc.DuplicateKeyError as duplicate:
            raise UnjudgedError(_duplicate(duplicate)) from None
        except RecursionError:
            raise UnjudgedError("an answer nested too deep to parse") from None
        except ValueError:
            raise UnjudgedError("an answer that is not JSON") from None

    def _judged(self, message: Any, exchange: Exchange) -> Any:
        replacement = self._filter(message, exchange)
        return message if replacement is None else replacement

    def event(self, event: SseEvent, exchange: Exchange) -> bytes:
        """One event as it goes on. Every event type is judged (a client might read any), but ``endpoint``.
        UnjudgedError when the rest of the stream cannot be judged."""
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

    def _judge_text(self, text: str | bytes, exchange: Exchange) -> str | None:
        """The JSON text to send instead of ``text`` (None: unchanged); ValueError when it is not JSON.

        Where an answer may bear interface, a key given twice is refused: parsers disagree on which
        one wins, so the proxy could judge one value and the client read the other."""
        try:
            message = json.loads(text, object_pairs_hook=jsonrpc.unique_keys if exchange.strict else None)
        except jsonrpc.DuplicateKeyError as duplicate:
            message = json.loads(text)
            if isinstance(message, list) or classify(message) in (MessageClass.RESPONSE, MessageClass.AMBIGUOUS):
                request_id = message.get("id") if isinstance(message, dict) else None
                return json.dumps(self.unjudged(request_id, _duplicate(duplicate)))
            # A server request or notification: judged as every parser reads it (the last key wins).
        if isinstance(message, list):  # no SDK takes a batch in an event; judged all the same
            judged = [self._judged(item, exchange) for item in message]
            changed = any(new is not old for new, old in zip(judged, message, strict=True))
            return jsonrpc.dumps(judged).decode() if changed else None
        replacement = self._filter(message, exchange)
        return None if replacement is None else jsonrpc.dumps(replacement).decode()

    def _filter(self, message: Any, exchange: Exchange) -> Any | None:
        if not isinstance(message, dict):
            return None
        method = exchange.method_of(message)
        replacement = self.policy.filter_response(message, method, exchange.principal, exchange.client)
        if replacement is not None and classify(message) is MessageClass.AMBIGUOUS:
            self.metrics.unjudged.inc()
        return replacement

    def refusal(self, exchange: Exchange, detail: str) -> dict[str, Any]:
        """The error that answers an exchange whose answer cannot be judged (counted)."""
        return self.unjudged(next(iter(exchange.methods), None), detail)

    def unjudged(self, request_id: Any, detail: str) -> dict[str, Any]:
        """The error that answers what the proxy cannot check (counted)."""
        self.metrics.unjudged.inc()
        return jsonrpc.unjudged(request_id, detail)


#: Keys a refusal may name when one is given twice: the protocol's own, never one the server made up.
_PROTOCOL_KEYS = frozenset({"jsonrpc", "id", "method", "params", "result", "error", "instructions", "tools",
                            "prompts", "resources", "resourceTemplates", "description", "name", "inputRequests"})


def _duplicate(error: jsonrpc.DuplicateKeyError) -> str:
    """What a refusal says of a key given twice: the key only when it is one of the protocol's."""
    key = error.key
    return f"an answer with the key {key!r} twice" if key in _PROTOCOL_KEYS else "an answer with a key given twice"
