"""What the report endpoint spends before it knows the caller: open connections per source address, the
form of a bearer token (anything but a service-account token's is refused without a TokenReview), and the
token buckets (per pod once identified; per source address for tokens no cache knows)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["MAX_TOKEN_LENGTH", "ConnectionLimit", "RateLimiter", "token_shaped"]

PRUNE_AT = 10_000


#: A service-account token is a JWS in compact form: three base64url parts. Anything else, or longer, is
#: refused without a TokenReview.
MAX_TOKEN_LENGTH = 16 * 1024
_TOKEN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def token_shaped(token: str) -> bool:
    parts = token.split(".")
    return len(token) <= MAX_TOKEN_LENGTH and len(parts) == 3 and all(parts) and set(token) <= _TOKEN_CHARACTERS



class RateLimiter:
    """A token bucket per pod uid."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate, self._burst = rate, float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._next_prune = PRUNE_AT

    def admit(self, key: str) -> float:
        """0 when admitted, else the seconds to wait."""
        now = time.monotonic()
        if len(self._buckets) > self._next_prune:
            self._prune(now)
        tokens, last = self._buckets.get(key, (self._burst, now))
        tokens = min(self._burst, tokens + (now - last) * self._rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self._rate if self._rate > 0 else 60.0

    def _prune(self, now: float) -> None:
        """Drop the buckets that have refilled (pods gone or quiet): they would start full anyway."""
        refill = self._burst / self._rate if self._rate > 0 else 0.0
        self._buckets = {key: (tokens, last) for key, (tokens, last) in self._buckets.items()
                         if now - last < refill}
        self._next_prune = max(PRUNE_AT, 2 * len(self._buckets))


class ConnectionLimit:
    """At most ``per_source`` open connections from one address (before anything is read: a caller
    that opens connections and holds them, idle or with a slow request, is cut off at the limit).
    Installed on aiohttp's ``web.Server``, whose connection_made/connection_lost every connection goes
    through; the other replicas' addresses are exempt."""

    def __init__(self, per_source: int, exempt: Callable[[], frozenset[str]] = frozenset) -> None:
        self.per_source = per_source
        self._exempt = exempt
        self._open: dict[str, int] = {}
        self._source_of: dict[int, str] = {}
        self.refused = 0

    def install(self, server: web.Server) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            peer = transport.get_extra_info("peername")
            source = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
            if self.per_source and source not in self._exempt() and self._open.get(source, 0) >= self.per_source:
                self.refused += 1
                transport.close()
                return
            self._open[source] = self._open.get(source, 0) + 1
            self._source_of[id(handler)] = source

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            source = self._source_of.pop(id(handler), None)
            if source is not None:
                left = self._open.get(source, 1) - 1
                if left > 0:
                    self._open[source] = left
                else:
                    self._open.pop(source, None)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def open_from(self, source: str) -> int:
        return self._open.get(source, 0)
