"""Canonical JSON: RFC 8785 (JSON Canonicalization Scheme).

``canonical_json`` is the only serializer digests go through. Its output is
byte-identical to ``rfc8785.dumps``; integers outside the I-JSON safe range
(|n| > 2**53 - 1) are first read as IEEE 754 doubles, which is what RFC 8785
section 3.2.2.3 prescribes for every JSON number.

Speed: ``rfc8785.dumps`` is pure Python, about 5x slower than ``json.dumps``.
For plain JSON data, ``json.dumps(ensure_ascii=False, sort_keys=True,
allow_nan=False)`` with compact separators (the C encoder) already writes RFC
8785 except in three places, and this module uses its output only after a
pre-scan (``_prepared``) has shown, or arranged, that the two agree:

- Strings: identical. Both escape exactly ``"``, ``\\`` and the controls below
  U+0020 (``\\b \\t \\n \\f \\r``, otherwise ``\\u00xx`` in lower-case hex) and
  write everything else, U+007F and U+2028 included, as UTF-8. A lone surrogate
  cannot be UTF-8: it fails the final encode and takes the exact path, which
  refuses it.
- Numbers: ``repr(float)`` and the ECMAScript form RFC 8785 uses pick the same
  shortest digits and differ only in layout: ``1.0`` vs ``1``, ``-0.0`` vs ``0``,
  ``1e+16`` vs ``10000000000000000`` (up to ``e+20``), ``1e-05`` vs ``0.00001``,
  ``1e-07`` vs ``1e-7``; and an integer beyond 2**53 - 1 must be written as a
  double. The pre-scan replaces integral floats of the safe range by ints (the
  common case: ``"maximum": 1.0``) and flags the other shapes; when it flagged
  any, the number tokens outside strings are rewritten through ``rfc8785``.
- Key order: Python sorts by code point, RFC 8785 by UTF-16 code unit. They
  differ only for a key holding a character beyond U+FFFF; the pre-scan checks
  such an object's order both ways and takes the exact path if they differ.

The pre-scan visits containers and numbers, not strings; anything but a plain
``dict``, ``list``, ``str``, ``int``, ``float``, ``bool`` or ``None`` takes the
exact path (``rfc8785`` itself), which also produces every error. The property
tests in ``tests/unit/test_canonical.py`` compare both paths on arbitrary JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, TypeGuard

import rfc8785

from lockstep.core.errors import MalformedInterfaceError, NonFiniteNumberError

__all__ = ["canonical_json", "is_json_number", "json_equal"]

_SAFE_INTEGER = 2**53 - 1
_STRING_TYPES = frozenset({str, bool, type(None)})
_LAST_BMP_CHARACTER = "\uffff"

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False, check_circular=False
)
# A finite float's repr that is not its RFC 8785 form (integral floats of the safe range never get here).
_NOT_JCS_FLOAT_REPR = re.compile(r"\.0$|e-0|e\+(?:1[6-9]|20)$")
# Everything up to the next number token outside a string (strings consumed whole), then the token.
# Possessive quantifiers keep the scan linear; the empty alternative matches the tail after the last number.
_NEXT_NUMBER = re.compile(r'((?:[^"\d-]++|"(?:[^"\\]++|\\.)*+")*+)(-?\d[\d.eE+-]*+|\Z)')


class _NeedsExactPath(Exception):
    """The fast path cannot show that its output equals RFC 8785 for this value."""


def canonical_json(value: Any) -> bytes:
    """Serialize a JSON value in RFC 8785 canonical form (UTF-8 bytes).

    Raises NonFiniteNumberError for NaN, an infinity or an integer beyond the
    double range, and MalformedInterfaceError for anything else that is not
    JSON (a non-string key, a lone surrogate, an unsupported type).
    """
    try:
        numbers_to_rewrite: list[bool] = []
        text = _ENCODER.encode(_prepared(value, numbers_to_rewrite))
        if numbers_to_rewrite:
            text = _NEXT_NUMBER.sub(_rewrite_number, text)
        return text.encode("utf-8")
    except (_NeedsExactPath, ValueError, TypeError, OverflowError):
        return _exact(value)


def _prepared(value: Any, numbers_to_rewrite: list[bool]) -> Any:
    """``value`` with every integral float of the safe range replaced by an int, copying only the
    containers on the way to one. Appends to ``numbers_to_rewrite`` when another number will not
    come out of json.dumps in its RFC 8785 form; raises _NeedsExactPath (or TypeError, for a key
    that is not a string) when json.dumps cannot serve at all.

    Recursive like both serializers, so it fails at the depth they would. The loops are the hot
    path of digesting: they skip strings and safe integers without a call."""
    kind = type(value)
    if kind is dict:
        keys = "".join(value)  # TypeError on a key that is not a string
        if not keys.isascii() and max(keys) > _LAST_BMP_CHARACTER and not _utf16_order_agrees(value):
            raise _NeedsExactPath
        for item in value.values():
            item_kind = type(item)
            if item_kind in _STRING_TYPES or (item_kind is int and -_SAFE_INTEGER <= item <= _SAFE_INTEGER):
                continue
            prepared = _prepared(item, numbers_to_rewrite)
            if prepared is not item:
                return dict(_with_replacement(value.items(), item, prepared, numbers_to_rewrite))
        return value
    if kind is list:
        for item in value:
            item_kind = type(item)
            if item_kind in _STRING_TYPES or (item_kind is int and -_SAFE_INTEGER <= item <= _SAFE_INTEGER):
                continue
            prepared = _prepared(item, numbers_to_rewrite)
            if prepared is not item:
                pairs = _with_replacement(enumerate(value), item, prepared, numbers_to_rewrite)
                return [entry for _, entry in pairs]
        return value
    if kind is float:
        if value.is_integer() and -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return int(value)  # RFC 8785 writes an integral double as its digits: 1.0 -> 1, -0.0 -> 0
        if _NOT_JCS_FLOAT_REPR.search(float.__repr__(value)):
            numbers_to_rewrite.append(True)
        return value  # NaN and infinities stay: the encoder refuses them (allow_nan=False)
    if kind is int:
        if not -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            numbers_to_rewrite.append(True)
        return value
    if kind in _STRING_TYPES:
        return value
    raise _NeedsExactPath


def _with_replacement(
    entries: Iterable[tuple[Any, Any]], changed: Any, replacement: Any, numbers_to_rewrite: list[bool]
) -> Iterator[tuple[Any, Any]]:
    """A container's entries once the entry holding ``changed`` became ``replacement``: the entries
    before it are already prepared (unchanged), the ones after it are prepared now. The first entry
    holding ``changed`` is the one: an earlier one would have changed first."""
    entries = iter(entries)
    for key, item in entries:
        if item is changed:
            yield key, replacement
            break
        yield key, item
    for key, item in entries:
        yield key, _prepared(item, numbers_to_rewrite)


def _utf16_order_agrees(mapping: dict[str, Any]) -> bool:
    return sorted(mapping) == sorted(mapping, key=_utf16_code_units)


def _utf16_code_units(key: str) -> bytes:
    try:
        return key.encode("utf-16-be")
    except UnicodeEncodeError:  # a lone surrogate: the exact path refuses it
        raise _NeedsExactPath from None


def _rewrite_number(match: re.Match[str]) -> str:
    before, token = match.group(1, 2)
    if "." in token or "e" in token or "E" in token:
        return before + rfc8785.dumps(float(token)).decode("ascii")
    if len(token.lstrip("-")) >= 16:
        return before + rfc8785.dumps(_as_i_json(int(token))).decode("ascii")
    return before + token


def _as_i_json(value: Any) -> Any:
    """``value`` with every integer beyond 2**53 - 1 read as a double (OverflowError past the range)."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) > _SAFE_INTEGER else value
    if isinstance(value, dict):
        return {key: _as_i_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_i_json(item) for item in value]
    return value


def _exact(value: Any) -> bytes:
    """The reference path: ``rfc8785`` itself, with its errors as Lockstep's."""
    try:
        return rfc8785.dumps(_as_i_json(value))
    except rfc8785.FloatDomainError as error:
        raise NonFiniteNumberError(f"{error}: not a JSON number") from None
    except OverflowError:
        raise NonFiniteNumberError("an integer beyond the range of IEEE 754 doubles is not a JSON number") from None
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as error:
        raise MalformedInterfaceError(f"not canonical JSON: {error}") from None


def is_json_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_equal(left: Any, right: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``; objects compare by keys."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, dict):
        return (isinstance(right, dict) and left.keys() == right.keys()
                and all(json_equal(left[key], right[key]) for key in left))
    if isinstance(left, list):
        return (isinstance(right, list) and len(left) == len(right)
                and all(json_equal(a, b) for a, b in zip(left, right)))
    if is_json_number(left) and is_json_number(right):
        return bool(left == right)
    return type(left) is type(right) and bool(left == right)
