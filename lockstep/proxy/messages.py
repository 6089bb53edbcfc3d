"""What a JSON-RPC message is, as the most lenient MCP client in use takes it: one rule for the proxy.

Clients disagree on messages that are more than one thing at once. The Python SDK validates every message
against the pydantic union ``JSONRPCRequest | JSONRPCNotification | JSONRPCResponse | JSONRPCError``
(``mcp_types/jsonrpc.py``), whose members ignore keys they do not know: ``{"id": 1, "result": {...},
"method": null}`` fails as a request (``method`` is not a string) and validates as the response, and so do
``"method": 5`` and ``"method": "x", "params": 5`` (a request's params must be an object), while
``"result"`` beside ``"error"`` is taken as the error. The TypeScript SDK's schemas are strict
(``JSONRPCMessageSchema``: every member refuses an unknown key), so it refuses all of these outright.

The proxy therefore judges every object that carries ``result`` or ``error`` as a response whatever else it
holds, and refuses an object that is more than one class (a ``method`` beside a ``result`` or an
``error``, a ``result`` beside an ``error``, a ``method`` that is not a string): no legitimate server sends
one, and which class a client picks is a bet on its parser.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["MessageClass", "classify"]

_ANSWER_KEYS = ("result", "error")


class MessageClass(enum.Enum):
    #: ``result`` or ``error`` and no ``method``: a client takes it for the answer to a pending request.
    RESPONSE = "response"
    #: A string ``method`` and an ``id``, no ``result``/``error``: the server asks the client something.
    REQUEST = "request"
    #: A string ``method``, no ``id``, no ``result``/``error``.
    NOTIFICATION = "notification"
    #: More than one class at once, or a ``method`` that is not a string: refused (fail closed).
    AMBIGUOUS = "ambiguous"
    #: Not an object, or none of ``method``, ``result``, ``error``: no client takes it as a message.
    NONE = "none"


def classify(message: Any) -> MessageClass:
    """The class of one decoded JSON value as a message from a server (a batch: classify each element)."""
    if not isinstance(message, dict):
        return MessageClass.NONE
    answers = sum(key in message for key in _ANSWER_KEYS)
    if "method" in message:
        if answers or not isinstance(message["method"], str):
            return MessageClass.AMBIGUOUS
        return MessageClass.REQUEST if "id" in message else MessageClass.NOTIFICATION
    if answers == 2:
        return MessageClass.AMBIGUOUS
    return MessageClass.RESPONSE if answers else MessageClass.NONE
