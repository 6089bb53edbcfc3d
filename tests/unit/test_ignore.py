"""Ignore rules: only reviewed fields inside components, never whole components."""

import pytest

from lockstep.core import IgnoreRuleError, Interface, digest_interface, parse_ignore_rules

BASE = {
    "instructions": "hello",
    "tools": [
        {"name": "a", "description": "d", "_meta": {"build": "1", "keep": True}},
        {"name": "b", "_meta": {"build": "7"}},
    ],
    "resources": [{"uri": "x://1", "annotations": {"lastModified": "2026-01-01"}}],
}


def digest(document, rules=()):
    return digest_interface(Interface.from_document(document), rules).digest


def changed(**tool_a):
    return {**BASE, "tools": [{**BASE["tools"][0], **tool_a}, BASE["tools"][1]]}


def test_an_ignored_field_does_not_move_the_digest():
    rules = ["/tools/*/_meta/build"]
    moved = {**BASE, "tools": [{**BASE["tools"][0], "_meta": {"build": "2", "keep": True}},
                               {"name": "b", "_meta": {"build": "8"}}]}
    assert digest(moved, rules) == digest(BASE, rules)
    assert digest(moved) != digest(BASE)


def test_fields_next_to_an_ignored_one_still_count():
    rules = ["/tools/*/_meta/build"]
    assert digest(changed(_meta={"build": "1", "keep": False}), rules) != digest(BASE, rules)
    assert digest(changed(description="evil"), rules) != digest(BASE, rules)


def test_wildcard_in_objects_and_nested_lists():
    rules = ["/resources/*/annotations/*"]
    moved = {**BASE, "resources": [{"uri": "x://1", "annotations": {"lastModified": "2027-01-01"}}]}
    assert digest(moved, rules) == digest(BASE, rules)


def test_ignoring_instructions_drops_them():
    assert digest({**BASE, "instructions": "other"}, ["/instructions"]) == digest(BASE, ["/instructions"])


def test_escaped_tokens():
    document = {"tools": [{"name": "a", "_meta": {"com.example/build": "1"}}]}
    moved = {"tools": [{"name": "a", "_meta": {"com.example/build": "2"}}]}
    assert digest(moved, ["/tools/*/_meta/com.example~1build"]) == digest(document, ["/tools/*/_meta/com.example~1build"])


@pytest.mark.parametrize(
    ("pointer", "message"),
    [
        ("tools/*/x", "must start with '/'"),
        ("/toolz/*/x", "must start with /instructions"),
        ("/tools", "inside a component"),
        ("/tools/*", "inside a component"),
        ("/tools/0/description", "must be '\\*'"),
        ("/tools/*/name", "key 'name'"),
        ("/resources/*/uri", "key 'uri'"),
        ("/instructions/x", "instructions are a string"),
        ("/tools/*/a~2b", "escaped"),
        ("/tools/*/*", "must name the field"),
    ],
)
def test_rules_that_could_hide_components_or_are_not_pointers_are_refused(pointer, message):
    with pytest.raises(IgnoreRuleError, match=message):
        parse_ignore_rules([pointer])


def test_rules_never_change_the_interface_itself():
    interface = Interface.from_document(BASE)
    digest_interface(interface, ["/tools/*/_meta/build"])
    assert interface.to_document()["tools"][0]["_meta"] == {"build": "1", "keep": True}
