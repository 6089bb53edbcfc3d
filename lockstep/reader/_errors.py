"""The reader's error tree (drawn in :mod:`lockstep.reader`) and the short texts its messages use."""

from __future__ import annotations

from lockstep.core.errors import LockstepError


class ReaderError(LockstepError):
    """The live server could not be read; the message is one line."""

    reason = "ReadFailed"


class ServerUnreachableError(ReaderError):
    """No connection, an HTTP error status, or the connection dropped."""

    reason = "ServerUnreachable"


class ReadTimeoutError(ReaderError):
    """The server did not answer everything within the deadline."""

    reason = "ReadTimeout"


class MalformedResponseError(ReaderError):
    """An answer that is not valid JSON-RPC, or not shaped like the result asked for."""

    reason = "MalformedResponse"


class ResponseTooLargeError(ReaderError):
    """One answer, or the answers of one read together, exceed the byte limit."""

    reason = "ResponseTooLarge"


class CursorLoopError(ReaderError):
    """Pagination that does not end: a repeated cursor, or too many pages."""

    reason = "CursorLoop"


class ProtocolError(ReaderError):
    """The server answered with a JSON-RPC error, or speaks a protocol version we do not."""

    reason = "ProtocolError"


def _one_line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(cursor: str) -> str:
    return repr(cursor if len(cursor) <= 40 else cursor[:37] + "...")
