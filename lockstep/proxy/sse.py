"""Server-sent events, split and rewritten without touching what the proxy does not change.

An event ends at a blank line; lines end with CRLF, LF or CR (the HTML living standard's
event-stream grammar). :class:`EventSplitter` cuts a byte stream into whole events, each
kept as the exact bytes received, so that everything the proxy passes on (ids, ``retry:``,
comments such as ``: ping``, empty priming events) goes out byte for byte. Only an event
whose JSON-RPC message the policy changes is re-encoded, by :func:`replace_data`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["EventSplitter", "EventTooLargeError", "SseEvent", "parse_event", "replace_data"]

_LINE_END = rb"(?:\r\n|\r(?!\n)|\n)"
_EVENT_END = re.compile(_LINE_END + _LINE_END)
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|$)")


class EventTooLargeError(ValueError):
    """One event is longer than the limit (the proxy cannot check what it cannot hold)."""


@dataclass(frozen=True)
class SseEvent:
    raw: bytes
    event: str
    data: str | None  # None: the event has no data line (a comment, a retry, a bare id)


class EventSplitter:
    """Feed bytes, get whole events (raw bytes, terminating blank line included)."""

    def __init__(self, max_event: int) -> None:
        self._buffer = b""
        self._scanned = 0
        self._max_event = max_event

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events = []
        while True:
            # A lone CR at the end may be the first half of a CRLF: wait for the next byte.
            match = _EVENT_END.search(self._buffer, max(0, self._scanned - 3))
            if match is None or (match.end() == len(self._buffer) and self._buffer.endswith(b"\r")):
                break
            events.append(self._buffer[: match.end()])
            self._buffer = self._buffer[match.end():]
            self._scanned = 0
        if len(self._buffer) > self._max_event:
            raise EventTooLargeError(f"an event longer than {self._max_event} bytes")
        self._scanned = len(self._buffer)
        return events

    def finish(self) -> tuple[list[bytes], bytes]:
        """When the stream ends: the event a final lone CR completes (it can no longer be the first half
        of a CRLF, and some parsers dispatch it), and what is left (an unterminated event)."""
        match = _EVENT_END.search(self._buffer, max(0, self._scanned - 3))
        if match is not None and match.end() == len(self._buffer):
            event, self._buffer = self._buffer, b""
            return [event], b""
        return [], self.rest()

    def rest(self) -> bytes:
        """What is left when the stream ends (an unterminated event, which clients discard)."""
        rest, self._buffer = self._buffer, b""
        return rest


def parse_event(raw: bytes) -> SseEvent:
    event, data_lines = "message", []
    for line, _ in _LINE.findall(raw):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"event":
            event = value.decode("utf-8", "replace")
        elif name == b"data":
            data_lines.append(value.decode("utf-8", "replace"))
    return SseEvent(raw, event, "\n".join(data_lines) if data_lines else None)


def replace_data(raw: bytes, data: str) -> bytes:
    """The event with its data lines replaced by one ``data:`` line; every other line kept in place."""
    out, replaced = [], False
    for line, end in _LINE.findall(raw):
        if line.startswith(b"data:") or line == b"data":
            if not replaced:
                out.append(b"data: " + data.encode() + end)
                replaced = True
            continue
        if line or end:
            out.append(line + end)
    return b"".join(out)
