"""Properties of lockstep/v1 digests: what changes a digest, and what never does."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from typing import Any

import rfc8785
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st
from lockstep_testing.json_strategies import json_objects, scalars, texts

from lockstep.core import (
    FORMULA,
    ComponentKind,
    DuplicateComponentError,
    Interface,
    component_digest,
    digest_interface,
)
from lockstep.core.model import loads_strict
from lockstep.core.report import Observation
from lockstep.core.revision import Revision

LISTS = {"tools": "name", "prompts": "name", "resources": "uri", "resourceTemplates": "uriTemplate"}
names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)


def _component(key_field: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda key, extra: {**extra, key_field: key}, names, json_objects(max_leaves=8))


documents = st.fixed_dictionaries(
    {},
    optional={
        "instructions": texts,
        **{
            list_key: st.lists(_component(key_field), max_size=3, unique_by=lambda item, k=key_field: item[k])
            for list_key, key_field in LISTS.items()
        },
    },
)


def digest_of(document: dict[str, Any]) -> dict[str, Any]:
    return digest_interface(Interface.from_document(document)).to_dict()


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON with every object's keys in another order (list order is content: kept)."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@given(documents, st.randoms(use_true_random=False))
def test_reordering_components_and_keys_never_changes_a_digest(document, rng):
    reordered = shuffled(document, rng)
    for list_key in LISTS:
        if list_key in reordered:
            rng.shuffle(reordered[list_key])
    assert digest_of(reordered) == digest_of(document)


def scalar_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in scalar_paths(item, (*path, key))]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in scalar_paths(item, (*path, index))]
    return [path]


def with_value(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    changed = copy.copy(value)
    changed[path[0]] = with_value(value[path[0]], path[1:], new)
    return changed


def same_json(a: Any, b: Any) -> bool:
    """Equal as RFC 8785 sees them (False is not 0, 1.0 is 1), by the reference package."""
    def as_doubles(value: Any) -> Any:
        return float(value) if type(value) is int and abs(value) > 2**53 - 1 else value
    return rfc8785.dumps(as_doubles(a)) == rfc8785.dumps(as_doubles(b))


@settings(max_examples=150)
@given(documents, st.data())
def test_any_change_of_any_value_changes_the_component_and_the_aggregate(document, data):
    interface = Interface.from_document(document)
    assume(len(interface) > 0)
    target = data.draw(st.sampled_from(list(interface)))
    path = data.draw(st.sampled_from(scalar_paths(target.definition)))
    old = _get(target.definition, path)
    new = data.draw(scalars if target.kind is not ComponentKind.INSTRUCTIONS else texts)
    if path == (target.kind.key_field,):
        new = data.draw(names)  # a component's key stays a non-empty string
    assume(not same_json(old, new))
    changed_document = copy.deepcopy(document)
    if target.kind is ComponentKind.INSTRUCTIONS:
        changed_document["instructions"] = new
    else:
        items = changed_document[target.kind.list_key]
        index = next(i for i, item in enumerate(items) if item[target.kind.key_field] == target.name)
        items[index] = with_value(items[index], path, new)
    try:
        after = digest_interface(Interface.from_document(changed_document))
    except DuplicateComponentError:
        reject()  # the new key is another component's: an invalid interface, not a digest
    before = digest_interface(interface)
    assert after.digest != before.digest
    old_digest = before.component(target.kind, target.name).digest
    assert old_digest not in {entry.digest for entry in after.components}


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def number_text(number: float, rng: random.Random) -> str:
    """Another way to write the same IEEE double."""
    if isinstance(number, bool):
        return "true" if number else "false"
    if isinstance(number, int):
        forms = [str(number), f"{number}e0", f"{number}E+0"]
        if abs(number) <= 2**53:
            forms.append(f"{number}.0")
        return rng.choice(forms)
    return rng.choice([repr(number), repr(number).upper(), format(number, ".17g"), format(number, ".17e")])


def string_text(text: str, rng: random.Random) -> str:
    """A JSON string literal of ``text`` with a random mix of raw characters and \\u escapes."""
    parts = ['"']
    for character in text:
        code = ord(character)
        must_escape = character in '"\\' or code < 0x20
        if must_escape or rng.random() < 0.3:
            if code > 0xFFFF:
                high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
                parts.append(rng.choice(["\\u%04x\\u%04x", "\\u%04X\\u%04X"]) % (high, low))
            elif character == "/" and rng.random() < 0.5:
                parts.append("\\/")
            else:
                parts.append(rng.choice(["\\u%04x", "\\u%04X"]) % code)
        else:
            parts.append(character)
    parts.append('"')
    return "".join(parts)


def json_text(value: Any, rng: random.Random) -> str:
    """Hand-written JSON: random whitespace, escapes and number forms; keys in random order."""
    space = lambda: rng.choice(["", " ", "\n", "\t", "\r\n  "])
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        body = ",".join(f"{space()}{string_text(key, rng)}{space()}:{space()}{json_text(item, rng)}{space()}"
                        for key, item in items)
        return "{" + body + space() + "}"
    if isinstance(value, list):
        return "[" + ",".join(space() + json_text(item, rng) + space() for item in value) + space() + "]"
    if isinstance(value, str):
        return string_text(value, rng)
    if value is None:
        return "null"
    return number_text(value, rng)


@settings(max_examples=150)
@given(documents, st.randoms(use_true_random=False))
def test_a_digest_never_depends_on_whitespace_escapes_or_number_spelling(document, rng):
    expected = digest_of(document)
    for text in (
        json.dumps(document, ensure_ascii=True),
        json.dumps(document, ensure_ascii=False),
        json.dumps(document, ensure_ascii=True, indent=2, sort_keys=True),
        json.dumps(document, ensure_ascii=False, indent="\t", separators=(" , ", " : ")),
        json_text(document, rng),
    ):
        assert digest_of(loads_strict(text)) == expected, text


@given(json_objects(max_leaves=12), names)
def test_kinds_are_domain_separated(definition, name):
    digests = {kind: component_digest(kind, definition) for kind in ComponentKind}
    assert len(set(digests.values())) == len(ComponentKind)
    shared = {**definition, "name": name, "uri": name, "uriTemplate": name}
    as_tool = digest_of({"tools": [shared]})
    as_prompt = digest_of({"prompts": [shared]})
    assert as_tool["components"][0]["digest"] != as_prompt["components"][0]["digest"]
    assert as_tool["digest"] != as_prompt["digest"]


@given(documents)
def test_the_formula_name_is_next_to_every_digest(document):
    interface = Interface.from_document(document)
    assert digest_interface(interface).to_dict()["formula"] == FORMULA == "lockstep/v1"
    assert Revision.of(interface).to_spec(with_definitions=False)["formula"] == FORMULA
    assert Observation.of_interface(interface, "2026-11-22T00:00:00Z").to_dict()["formula"] == FORMULA


def test_digests_have_the_text_form_sha256_hex():
    result = digest_of({"instructions": "x", "tools": [{"name": "a"}]})
    for text in [result["digest"], *(entry["digest"] for entry in result["components"])]:
        prefix, _, hex_digits = text.partition(":")
        assert prefix == "sha256" and len(hex_digits) == 64 and set(hex_digits) <= set("0123456789abcdef")


def test_equal_numbers_in_other_forms_digest_the_same():
    one = digest_of(loads_strict('{"tools":[{"name":"a","x":[100,-0.0,9007199254740993,1E2]}]}'))
    other = digest_of(loads_strict('{"tools":[{"name":"a","x":[100.0,0,9007199254740992,100]}]}'))
    assert one == other


def test_invisible_characters_and_other_normal_forms_change_a_digest():
    plain = digest_of({"tools": [{"name": "a", "description": "caf\u00e9"}]})
    decomposed = digest_of({"tools": [{"name": "a", "description": "cafe\u0301"}]})
    hidden = digest_of({"tools": [{"name": "a", "description": "caf\u00e9\u200b"}]})
    upper = digest_of({"tools": [{"name": "a", "description": "CAF\u00c9"}]})
    assert len({plain["digest"], decomposed["digest"], hidden["digest"], upper["digest"]}) == 4


def test_list_result_fields_are_not_digested():
    base = {"tools": [{"name": "a"}]}
    noisy = {**base, "serverInfo": {"name": "s", "version": "2"}, "protocolVersion": "2025-11-25",
             "capabilities": {"tools": {"listChanged": True}}}
    assert digest_of(noisy) == digest_of(base)


def documented_formula(document: dict[str, Any]) -> tuple[str, list[str]]:
    """docs/digest.md's formula, from scratch: hashlib and the rfc8785 package, no Lockstep code."""

    def as_doubles(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, dict, list)):
            return value
        if isinstance(value, int):
            return float(value) if abs(value) > 2**53 - 1 else value
        if isinstance(value, dict):
            return {key: as_doubles(item) for key, item in value.items()}
        return [as_doubles(item) for item in value]

    def text(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    pairs = [("instructions", document["instructions"])] if document.get("instructions") is not None else []
    kinds = {"tools": "tool", "prompts": "prompt", "resources": "resource", "resourceTemplates": "resourceTemplate"}
    pairs += [(kinds[list_key], item) for list_key in kinds for item in document.get(list_key, [])]
    digests = [text(b"lockstep/v1\x00" + kind.encode() + b"\x00" + rfc8785.dumps(as_doubles(item)))
               for kind, item in pairs]
    return text(b"lockstep/v1\x00interface\x00" + rfc8785.dumps(sorted(digests))), sorted(digests)


@settings(max_examples=150)
@given(documents)
def test_digests_follow_the_documented_formula(document):
    aggregate, components = documented_formula(document)
    result = digest_of(document)
    assert result["digest"] == aggregate
    assert sorted(entry["digest"] for entry in result["components"]) == components
