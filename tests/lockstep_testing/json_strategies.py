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


def _signed(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Each value and its negation: one flat sample (a flatmap builds a strategy per draw, 3x the cost)."""
    return tuple(signed for value in values for signed in (value, -value))


def _decimal(mantissa: int, exponent: int) -> float:
    return float(f"{mantissa}e{exponent}")


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(_signed(BOUNDARY_FLOATS)),
    st.builds(_decimal, st.integers(-(10**17), 10**17), st.integers(-330, 310)).filter(math.isfinite),
    st.integers(-(2**60), 2**60).map(float),
)
integers = st.one_of(
    st.integers(-(2**31), 2**31),
    st.integers(-(2**70), 2**70),
    st.sampled_from(_signed(BOUNDARY_INTEGERS)),
)
scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)
#: The most items in one generated list or object.
MAX_ITEMS = 6


def json_values(max_leaves: int = 40) -> st.SearchStrategy[Any]:
    """Arbitrary JSON: nested lists and objects over the scalars above."""
    return st.recursive(
        scalars,
        lambda children: (st.lists(children, max_size=MAX_ITEMS)
                          | st.dictionaries(keys, children, max_size=MAX_ITEMS)),
        max_leaves=max_leaves,
    )


_KINDS = st.sampled_from(("scalar", "scalar", "list", "object"))  # as st.recursive: half scalars; shrinks to one
_SIZES = [st.integers(0, size) for size in range(MAX_ITEMS + 1)]


@st.composite
def _object_tree(draw: st.DrawFn, max_leaves: int) -> dict[str, Any]:
    """An object over the nodes of :func:`json_values`, with at most ``max_leaves`` scalars in all.

    Drawn against a budget, never retried: ``st.dictionaries(keys, json_values(n))`` bounds each value
    alone (six values, six times the leaves), and st.recursive redraws every value that outgrows its
    bound, which made most of test_digest's generation time.
    """
    left = max_leaves
    levels = max_leaves.bit_length()  # as deep as st.recursive nests: 2 ** (levels - 1) <= max_leaves

    def node(level: int, kind: str) -> Any:
        nonlocal left
        if kind == "scalar":
            left -= 1
            return draw(scalars)
        size = draw(_SIZES[min(MAX_ITEMS, left)])
        child = lambda: node(level + 1, draw(_KINDS) if level + 1 < levels else "scalar")
        if kind == "list":
            items: list[Any] = []
            while len(items) < size and left > 0:
                items.append(child())
            return items
        result: dict[str, Any] = {}
        for _ in range(size):
            if left <= 0:
                break
            key = draw(keys)
            if key not in result:  # keys of one object collide often (few short ones): a repeat adds nothing
                result[key] = child()
        return result

    return node(0, "object")


def json_objects(max_leaves: int = 40) -> st.SearchStrategy[dict[str, Any]]:
    """Arbitrary JSON objects: at most ``max_leaves`` scalars in all, nested up to st.recursive's depth."""
    return _object_tree(max_leaves)
