"""The reference canonical form that Lockstep's fast path is checked against: ``rfc8785.dumps`` after
the Lockstep rule (integers beyond 2**53 - 1 are IEEE doubles), written independently of the code."""

from __future__ import annotations

from typing import Any

import rfc8785

SAFE_INTEGER = 2**53 - 1


def as_doubles(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, dict, list)):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) > SAFE_INTEGER else value
    if isinstance(value, dict):
        return {key: as_doubles(item) for key, item in value.items()}
    return [as_doubles(item) for item in value]


def reference_jcs(value: Any) -> bytes:
    """RFC 8785 bytes of ``value`` by the reference implementation."""
    return rfc8785.dumps(as_doubles(value))
