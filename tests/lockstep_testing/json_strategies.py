"""Hypothesis strategies for arbitrary JSON values, biased towards what canonical JSON gets wrong.

Strings mix arbitrary Unicode with the characters where serializers differ: controls, quotes,
backslashes, U+007F, U+2028/2029, the last BMP characters (U+E000..U+FFFF) and astral-plane
characters, whose UTF-16 order differs from their code point order. Numbers mix arbitrary floats
(subnormals included) with decimal mantissa/exponent pairs, the boundaries of ECMAScript's number
layout (1e-7, 1e21, ...) and integers around 2**53.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

TRICKY_CHARACTERS = (
    [chr(code) for code in range(0x20)]
    + ['"', "\\", "/", "\x7f", "\x80", "\u00e9", "\u2028", "\u2029", "\u20ac", "\ufeff", "\u200b", "\u202e"]
    + ["\ue000", "\ufb33", "\ufffd", "\uffff", "\U00010000", "\U0001f600", "\U0010ffff"]
)
BOUNDARY_FLOATS = (
    0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
    1e-10, 1e-9, 1e-7, 1.5e-7, 1e-6, 1e-5, 1e-4, 0.1, 0.5, 1.0, -1.0, 100.0, 1e15, 1e16, 1.5e16, 1e20, 1e21,
    1e22, 1e23, 9007199254740991.0, 9007199254740992.0, 9007199254740994.0, 333333333.33333329,
    1424953923781206.25, 295147905179352830000.0,
)
BOUNDARY_INTEGERS = (
    0, 1, -1, 2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**53 + 1, 2**63, -(2**64), 10**21, 10**307,
)

characters = st.one_of(st.characters(codec="utf-8"), st.sampled_from(TRICKY_CHARACTERS))  # no lone surrogates
texts = st.text(characters, max_size=12)
# Short keys over a small alphabet, so that keys of one object share prefixes and collide in order.
keys = st.one_of(texts, st.text(st.sampled_from(["a", "b", "\ue000", "\uffff", "\U00010000", "\U0001f600"]), max_size=3))


def _decimal(mantissa: int, exponent: int) -> float:
    return float(f"{mantissa}e{exponent}")


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(BOUNDARY_FLOATS).flatmap(lambda value: st.sampled_from([value, -value])),
    st.builds(_decimal, st.integers(-(10**17), 10**17), st.integers(-330, 310)).filter(math.isfinite),
    st.integers(-(2**60), 2**60).map(float),
)
integers = st.one_of(
    st.integers(-(2**31), 2**31),
    st.integers(-(2**70), 2**70),
    st.sampled_from(BOUNDARY_INTEGERS).flatmap(lambda value: st.sampled_from([value, -value])),
)
scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)


def json_values(max_leaves: int = 40) -> st.SearchStrategy[Any]:
    """Arbitrary JSON: nested lists and objects over the scalars above."""
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
        max_leaves=max_leaves,
    )


def json_objects(max_leaves: int = 40) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(keys, json_values(max_leaves), max_size=6)
