"""Canonical JSON: RFC 8785 (JSON Canonicalization Scheme).

``canonical_json`` is the only serializer digests go through. Its output is
byte-identical to ``rfc8785.dumps``; integers outside the I-JSON safe range
(|n| > 2**53 - 1) are first read as IEEE 754 doubles, which is what RFC 8785
section 3.2.2.3 prescribes for every JSON number.
"""

from __future__ import annotations

from typing import Any

import rfc8785

__all__ = ["canonical_json"]

_SAFE_INTEGER = 2**53 - 1


def _as_i_json(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) > _SAFE_INTEGER else value
    if isinstance(value, dict):
        return {key: _as_i_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_i_json(item) for item in value]
    return value


def canonical_json(value: Any) -> bytes:
    """Serialize a JSON value in RFC 8785 canonical form (UTF-8 bytes)."""
    return rfc8785.dumps(_as_i_json(value))
