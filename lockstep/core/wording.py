"""Short texts of JSON values for the reasons of a finding ("a, b and 3 more", ``true``, ``'x'``)."""

from __future__ import annotations

from typing import Any

__all__ = ["json_scalar", "listing"]


def listing(items: list[str], shown: int = 5) -> str:
    """A short list for a reason: "a, b, c, d, e and 12 more"."""
    listed = ", ".join(items[:shown])
    return listed + (f" and {len(items) - shown} more" if len(items) > shown else "")


def json_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)
