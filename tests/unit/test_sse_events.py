"""The proxy's event-stream splitter: whole events, byte for byte, however the stream is cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.proxy.sse import EventSplitter, EventTooLargeError, parse_event, replace_data

STREAM = (b": ping\r\n\r\n"  # a comment keep-alive
          b"id: 0\r\ndata:\r\n\r\n"  # a priming event (id, empty data)
          b"retry: 3000\n\n"
          b"event: message\nid: 7\ndata: {\"jsonrpc\": \"2.0\",\ndata:  \"id\": 1, \"result\": {}}\n\n"
          b"data: {\"a\": 1}\r\r"  # CR line endings
          b"event: endpoint\r\ndata: /messages/?session_id=abc\r\n\r\n")
EVENTS = [b": ping\r\n\r\n", b"id: 0\r\ndata:\r\n\r\n", b"retry: 3000\n\n",
          b"event: message\nid: 7\ndata: {\"jsonrpc\": \"2.0\",\ndata:  \"id\": 1, \"result\": {}}\n\n",
          b"data: {\"a\": 1}\r\r", b"event: endpoint\r\ndata: /messages/?session_id=abc\r\n\r\n"]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=30))
def test_any_cut_of_the_stream_gives_the_same_events(cuts: list[int]) -> None:
    splitter, events, start = EventSplitter(1 << 20), [], 0
    for cut in [*sorted(cuts), len(STREAM)]:
        events += splitter.feed(STREAM[start:cut])
        start = cut
    assert events == EVENTS and splitter.rest() == b""


def test_events_are_parsed_as_a_client_parses_them() -> None:
    parsed = [parse_event(raw) for raw in EVENTS]
    assert [event.data for event in parsed] == [None, "", None, '{"jsonrpc": "2.0",\n "id": 1, "result": {}}',
                                                '{"a": 1}', "/messages/?session_id=abc"]
    assert parsed[5].event == "endpoint" and parsed[3].event == "message"


def test_a_rewritten_event_keeps_its_id_name_and_line_endings() -> None:
    rewritten = replace_data(EVENTS[3], '{"b": 2}')
    assert rewritten == b"event: message\nid: 7\ndata: {\"b\": 2}\n\n"
    assert replace_data(EVENTS[5], "/x") == b"event: endpoint\r\ndata: /x\r\n\r\n"


def test_an_event_larger_than_the_limit_is_refused() -> None:
    splitter = EventSplitter(100)
    with pytest.raises(EventTooLargeError):
        splitter.feed(b"data: " + b"x" * 200)
