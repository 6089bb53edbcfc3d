"""The report endpoint's cheap steps keep their checks: the body is read within the deadline unless it has
all arrived (a slow body is still cut off with SlowBody, an oversized one refused with TooLarge), and a
token hashed once by the caller is looked up and reviewed exactly as the token itself."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from unittest import mock

import pytest
from aiohttp import streams
from aiohttp.test_utils import make_mocked_request

from lockstep.core.refusals import Refusal
from lockstep.operator.reports import Identity, ReportRejected, TokenReviewer, _read_body, token_key

BODY = b'{"observedAt": "2026-11-22T02:00:00Z"}'


def _request(*, client_max_size: int = 1024) -> tuple[Any, streams.StreamReader]:
    protocol = mock.Mock(_reading_paused=False)
    payload = streams.StreamReader(protocol, 2**16, loop=asyncio.get_running_loop())
    request = make_mocked_request("POST", "/v1/reports", payload=payload, client_max_size=client_max_size)
    return request, payload


async def test_a_body_that_has_all_arrived_is_read_at_once() -> None:
    request, payload = _request()
    payload.feed_data(BODY)
    payload.feed_eof()
    assert await _read_body(request, 1024, timeout=0.05) == BODY


async def test_a_body_still_arriving_is_read_within_the_deadline() -> None:
    request, payload = _request()
    payload.feed_data(BODY[:10])
    asyncio.get_running_loop().call_later(0.02, lambda: (payload.feed_data(BODY[10:]), payload.feed_eof()))
    assert await _read_body(request, 1024, timeout=1.0) == BODY


async def test_a_slow_body_is_cut_off_at_the_deadline() -> None:
    request, payload = _request()
    payload.feed_data(BODY[:10])  # and nothing more, no end
    started = time.monotonic()
    with pytest.raises(ReportRejected) as refused:
        await asyncio.wait_for(_read_body(request, 1024, timeout=0.1), 30)  # the deadline ends it, not this
    assert refused.value.refusal is Refusal.SLOW_BODY
    assert time.monotonic() - started >= 0.09  # it waited for the body until the deadline


@pytest.mark.parametrize("arrived", [True, False], ids=["all arrived", "still arriving"])
async def test_an_oversized_body_is_refused_either_way(arrived: bool) -> None:
    request, payload = _request(client_max_size=16)
    payload.feed_data(BODY)  # 38 bytes over a limit of 16
    if arrived:
        payload.feed_eof()
    with pytest.raises(ReportRejected) as refused:
        await _read_body(request, 16, timeout=1.0)
    assert refused.value.refusal is Refusal.TOO_LARGE


class _Client:
    def __init__(self) -> None:
        self.reviews: list[str] = []

    async def token_review(self, token: str, audiences: list[str]) -> dict[str, Any]:
        self.reviews.append(token)
        name = token.split(".")[1]
        if name == "forged":
            return {"authenticated": False}
        return {"authenticated": True, "audiences": audiences,
                "user": {"username": "system:serviceaccount:agents:weather",
                         "extra": {"authentication.kubernetes.io/pod-name": [name],
                                   "authentication.kubernetes.io/pod-uid": [f"uid-{name}"]}}}


async def test_a_token_hashed_by_the_caller_is_reviewed_and_cached_as_the_token_itself() -> None:
    client = _Client()
    reviewer = TokenReviewer(client, ttl=60)  # type: ignore[arg-type]
    token, other, forged = "h.p1.s", "h.p2.s", "h.forged.s"
    key = token_key(token)
    assert key == token_key(token) and key != token_key(other) and token not in key
    assert not reviewer.known(token, key) and not reviewer.known(token)
    assert await reviewer.identify(token, key) == Identity("agents", "p1", "uid-p1")
    assert reviewer.known(token, key) and reviewer.known(token)  # one cache, whichever form asks
    assert await reviewer.identify(token) == Identity("agents", "p1", "uid-p1")
    assert not reviewer.known(other)
    assert await reviewer.identify(other, token_key(other)) == Identity("agents", "p2", "uid-p2")
    assert client.reviews == [token, other]  # one TokenReview per token
    for _ in range(2):
        with pytest.raises(ReportRejected) as refused:
            await reviewer.identify(forged, token_key(forged))
        assert refused.value.refusal is Refusal.UNAUTHENTICATED
    assert reviewer.known(forged) and client.reviews == [token, other, forged]  # the refusal is cached too
