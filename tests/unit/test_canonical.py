"""canonical_json is RFC 8785, byte for byte, whichever of its two paths serves a value."""

import json
import math
import struct
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lockstep_testing.jcs_reference import reference_jcs
from lockstep_testing.json_strategies import json_values, keys, texts

from lockstep.core import (
    InterfaceError,
    MalformedInterfaceError,
    NonFiniteNumberError,
    canonical,
    canonical_json,
)


def reference(value: Any) -> bytes:
    return reference_jcs(value)


def assert_same_as_reference(value: Any) -> None:
    try:
        expected = reference(value)
    except (ValueError, OverflowError):  # rfc8785 refuses it: canonical_json must refuse it too
        with pytest.raises(InterfaceError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@settings(max_examples=1500)
@given(json_values(max_leaves=60))
@example({"\U0001f600": 1, "\ufb33": 2, "\ue000": 3})
@example([1.0, -0.0, 1e16, 1e21, 1e-5, 1e-7, 2**53 + 1, "1.0", "e-05"])
def test_byte_identical_to_rfc8785_on_arbitrary_json(value):
    assert_same_as_reference(value)


@settings(max_examples=500)
@given(st.lists(st.tuples(keys, json_values(max_leaves=8)), max_size=12))
def test_object_key_order_is_utf16_order(pairs):
    assert_same_as_reference(dict(pairs))


@settings(max_examples=300)
@given(json_values(max_leaves=20), st.integers(min_value=0, max_value=2**1100))
def test_integers_beyond_doubles_are_refused_like_the_reference(value, huge):
    assert_same_as_reference([value, huge, -huge])


@settings(max_examples=300)
@given(texts, st.characters(categories=["Cs"]), texts)
def test_lone_surrogates_are_refused_in_values_and_keys(before, surrogate, after):
    text = before + surrogate + after
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(text)
    with pytest.raises(MalformedInterfaceError):
        canonical_json(text)
    with pytest.raises(MalformedInterfaceError):
        canonical_json({text: 1, "\U0001f600": 2})
    with pytest.raises(MalformedInterfaceError):
        canonical_json([{"k": [text]}])


def from_hex(bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(bits))[0]


# RFC 8785 Appendix B: IEEE 754 doubles and their canonical text.
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits, expected):
    number = from_hex(bits)
    assert canonical_json(number) == expected.encode()
    assert canonical_json({"n": [number]}) == b'{"n":[' + expected.encode() + b"]}"


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits):
    with pytest.raises(NonFiniteNumberError):
        canonical_json(from_hex(bits))
    with pytest.raises(NonFiniteNumberError):
        canonical_json({"deep": [{"n": from_hex(bits)}]})


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_never_emitted(number):
    for value in (number, [1, number], {"a": {"b": number}}, [1e-7, number], [2**60, number]):
        with pytest.raises(NonFiniteNumberError):
            canonical_json(value)


def test_rfc8785_section_3_2_2_example():
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(json.loads(text)) == expected.encode()


def test_rfc8785_section_3_2_3_sorting_example():
    value = json.loads(
        '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh",'
        ' "1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control",'
        ' "\\u00f6": "Latin Small Letter O With Diaeresis"}'
    )
    keys_in_order = [key for key in json.loads(canonical_json(value))]
    assert keys_in_order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert canonical_json(value) == reference(value)


@pytest.mark.parametrize("code", range(0x20))
def test_control_characters_use_short_escapes_or_lower_case_hex(code):
    short = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
    expected = short.get(code, f"\\u{code:04x}")
    assert canonical_json(chr(code)) == f'"{expected}"'.encode()
    assert canonical_json({chr(code): chr(code)}) == f'{{"{expected}":"{expected}"}}'.encode()


@pytest.mark.parametrize("character", ["\x7f", "\u2028", "\u2029", "/", "\u00e9", "\U0001f600", "\ufeff"])
def test_other_characters_are_written_as_utf8_unescaped(character):
    assert canonical_json(character) == b'"' + character.encode() + b'"'


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (2**53 - 1, "9007199254740991"),
        (2**53, "9007199254740992"),
        (2**53 + 1, "9007199254740992"),  # read as a double: rounds to even
        (2**60, "1152921504606847000"),
        (-(2**64), "-18446744073709552000"),
        (10**21, "1e+21"),
        (1.0, "1"),
        (-0.0, "0"),
        (100.0, "100"),
        (1e16, "10000000000000000"),
        (1e-5, "0.00001"),
        (1e-7, "1e-7"),
        (9007199254740994.0, "9007199254740994"),
    ],
)
def test_numbers_are_read_as_doubles(number, expected):
    assert canonical_json(number) == expected.encode()
    assert canonical_json([{"x": number}, "1.0"]) == f'[{{"x":{expected}}},"1.0"]'.encode()


def test_number_shapes_inside_strings_are_left_alone():
    value = {"a": "x:1.0,", "b": "[1e-05]", "c": "12345678901234567890", "d": 1e-7, "e": 1.0}
    assert canonical_json(value) == (
        b'{"a":"x:1.0,","b":"[1e-05]","c":"12345678901234567890","d":1e-7,"e":1}'
    )


def test_integer_beyond_double_range_is_refused():
    with pytest.raises(NonFiniteNumberError):
        canonical_json({"n": 2**1024})


@pytest.mark.parametrize("value", [{1: "one"}, {"a": {None: 1}}, [{True: 1}], {"a": {1.5: 1}}])
def test_keys_that_are_not_strings_are_refused(value):
    with pytest.raises(MalformedInterfaceError):
        canonical_json(value)


@pytest.mark.parametrize("value", [{1, 2}, b"bytes", {"a": object()}, [1j]])
def test_values_that_are_not_json_are_refused(value):
    with pytest.raises(MalformedInterfaceError):
        canonical_json(value)


def test_tuples_and_dict_subclasses_serialize_like_lists_and_objects():
    class Ordered(dict):
        pass

    value = (1, Ordered(b=1.0, a=[("x",)]))
    assert canonical_json(value) == b'[1,{"a":[["x"]],"b":1}]' == reference([1, {"a": [["x"]], "b": 1.0}])


def test_the_input_is_never_modified():
    value = {"a": [1.0, {"b": -0.0}], "c": 2**60}
    snapshot = json.dumps(value)
    canonical_json(value)
    assert json.dumps(value) == snapshot and isinstance(value["a"][0], float)


def test_plain_json_never_takes_the_slow_reference_path(monkeypatch):
    """The speed of digesting rests on the json.dumps path serving ordinary interfaces."""

    def refuse(value):
        raise AssertionError(f"rfc8785 called for {value!r}")

    monkeypatch.setattr(canonical.rfc8785, "dumps", refuse)
    tool = {"name": "t", "description": "Grüße \U0001f600 \u2028 \n", "inputSchema": {
        "type": "object", "properties": {"n": {"type": "number", "minimum": 0, "maximum": 1.0, "default": 0.25}},
        "required": ["n"]}, "annotations": {"readOnlyHint": True, "rank": None}}
    assert canonical_json(tool) == json.dumps(
        {**tool, "inputSchema": {**tool["inputSchema"], "properties": {"n": {
            "type": "number", "minimum": 0, "maximum": 1, "default": 0.25}}}},
        ensure_ascii=False, sort_keys=True, separators=(",", ":"),
    ).encode()
