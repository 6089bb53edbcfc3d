"""The JSON-RPC messages the proxy writes itself, and how it reads ids and keys: every error it answers
with is built here (refusals by the policy, what cannot be judged, a refused Host, a batch).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "BATCH_REFUSAL",
    "HOST_REFUSED_CODE",
    "INVALID_REQUEST_CODE",
    "REFUSED_CODE",
    "UNKNOWN_COMPONENT_CODE",
    "DuplicateKeyError",
    "dumps",
    "error",
    "event_bytes",
    "id_key",
    "isolated",
    "unique_keys",
    "unjudged",
]

#: JSON-RPC error for a call to a withheld component: the MCP spec's code for an unknown tool.
UNKNOWN_COMPONENT_CODE = -32602
#: JSON-RPC error (implementation-defined range) for a response refused in ``block`` mode, or one the
#: proxy cannot judge.
REFUSED_CODE = -32050
#: JSON-RPC error of a request refused by Host or Origin (the code the MCP SDKs use for theirs).
HOST_REFUSED_CODE = -32000
#: JSON-RPC's own code for a request it does not take (here: a batch).
INVALID_REQUEST_CODE = -32600


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response (``data`` only when given)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def unjudged(request_id: Any, detail: str) -> dict[str, Any]:
    """The error that answers what the proxy cannot check (fail closed)."""
    return error(request_id, REFUSED_CODE, f"lockstep: refused {detail}: it cannot be checked")


#: The message of every refusal while the pod is isolated (enforcement Isolate, a verdict that is not True).
ISOLATED_MESSAGE = "isolated by Lockstep: the interface is not approved"


def isolated(request_id: Any, detail: str = "") -> dict[str, Any]:
    """The error that answers every request while the pod is isolated."""
    return error(request_id, REFUSED_CODE, ISOLATED_MESSAGE + (f" ({detail})" if detail else ""))


BATCH_REFUSAL = error(None, INVALID_REQUEST_CODE, "lockstep proxy: JSON-RPC batches are refused (MCP removed them "
                      "in 2025-06-18); send one message per request")


def event_bytes(message: Any) -> bytes:
    """``message`` as one SSE event (the legacy SSE transport answers on its GET stream)."""
    return b"event: message\r\ndata: " + json.dumps(message).encode() + b"\r\n\r\n"


def id_key(request_id: Any) -> Any:
    """A request id as a dict key (an object or array id by its JSON text)."""
    return json.dumps(request_id) if isinstance(request_id, (dict, list)) else request_id


def dumps(message: Any) -> bytes:
    """JSON text in UTF-8; a lone surrogate (which UTF-8 cannot carry) is written as an escape."""
    try:
        return json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(message).encode()


class DuplicateKeyError(ValueError):
    """A JSON object with a key given twice (the key's repr is the message)."""

    def __init__(self, key: str) -> None:
        super().__init__(repr(key))
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a key given twice: parsers disagree on which one wins."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise DuplicateKeyError(duplicate)
    return result
