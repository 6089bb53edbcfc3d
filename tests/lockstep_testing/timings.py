"""The operator's heartbeats, lifetimes and API retries as the tests run them (OperatorConfig fields):
the same behaviour as the defaults (a 5 s heartbeat, a 20 s peering lifetime, retries of 1..15 s), in
tenths of seconds, so that replica and outage tests wait on milliseconds, not on the real timers.

The lifetime is several heartbeats, so that a test's event loop stalled under load (the suite runs in
parallel) does not expire a live replica."""

from __future__ import annotations

from typing import Any

__all__ = ["FAST_TIMINGS", "fast_timing_flags"]

FAST_TIMINGS: dict[str, Any] = {
    "peering_heartbeat": 0.2,
    "peering_lifetime": 3,
    "api_backoffs": (0.1, 0.2, 0.5),
    "api_backoff_then": 1.0,
    "api_probe_interval": 0.2,
}


def fast_timing_flags(**overrides: Any) -> list[str]:
    """FAST_TIMINGS (with ``overrides``) as ``lockstep operator``'s hidden flags, for an operator process."""
    timings = {**FAST_TIMINGS, **overrides}
    return ["--peering-heartbeat", str(timings["peering_heartbeat"]),
            "--peering-lifetime", str(timings["peering_lifetime"]),
            "--api-backoffs", ",".join(str(wait) for wait in timings["api_backoffs"]),
            "--api-backoff-then", str(timings["api_backoff_then"]),
            "--api-probe-interval", str(timings["api_probe_interval"])]
