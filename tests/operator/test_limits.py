"""The per-pod token bucket of the report endpoint."""

from __future__ import annotations

import time

from lockstep.operator.report_limits import RateLimiter


def test_burst_then_wait() -> None:
    limiter = RateLimiter(rate=1.0, burst=2)
    assert limiter.admit("a") == 0 and limiter.admit("a") == 0
    wait = limiter.admit("a")
    assert 0 < wait <= 1.0
    assert limiter.admit("b") == 0  # another pod has its own bucket


def test_refilled_buckets_are_pruned() -> None:
    limiter = RateLimiter(rate=1000.0, burst=1)
    for index in range(10_001):
        limiter.admit(f"pod-{index}")
    time.sleep(0.01)  # every bucket refills within 1 ms
    limiter.admit("late")
    assert len(limiter._buckets) == 1
