"""The interface model: what is kept, and what makes an interface invalid."""

import json

import pytest

from lockstep.core import (
    ComponentKind,
    DuplicateComponentError,
    Interface,
    Limits,
    MalformedInterfaceError,
    MissingKeyError,
    NestingTooDeepError,
    NonFiniteNumberError,
    PayloadTooLargeError,
)
from lockstep.core.model import loads_strict

FULL = {
    "instructions": "Use the weather tools.",
    "serverInfo": {"name": "weather", "version": "1.0.0"},
    "tools": [{"name": "get_forecast", "description": "d", "inputSchema": {"type": "object"},
               "x-vendor": {"anything": [1, 2.5, None]}, "_meta": {"k": "v"}}],
    "prompts": [{"name": "summary", "arguments": [{"name": "city", "required": True}]}],
    "resources": [{"uri": "weather://stations", "name": "stations", "mimeType": "text/plain"}],
    "resourceTemplates": [{"uriTemplate": "weather://city/{name}", "name": "city"}],
}


def test_every_kind_is_kept_whole_with_unknown_fields():
    interface = Interface.from_document(FULL)
    assert interface.instructions == "Use the weather tools."
    tool = interface.get(ComponentKind.TOOL, "get_forecast")
    assert tool is not None and tool.definition == FULL["tools"][0]
    assert interface.get(ComponentKind.RESOURCE, "weather://stations") is not None
    assert interface.get(ComponentKind.RESOURCE_TEMPLATE, "weather://city/{name}") is not None
    assert [component.ref for component in interface][:2] == ["instructions/instructions", "tool/get_forecast"]


def test_server_info_is_not_part_of_the_interface():
    document = interface_document = Interface.from_document(FULL).to_document()
    assert "serverInfo" not in document
    assert interface_document["tools"] == FULL["tools"]


def test_missing_lists_mean_none():
    assert len(Interface.from_document({})) == 0


@pytest.mark.parametrize(
    ("kind", "items", "key"),
    [
        ("tools", [{"name": "a"}, {"name": "a", "description": "other"}], "name"),
        ("prompts", [{"name": "p"}, {"name": "p"}], "name"),
        ("resources", [{"uri": "x://1"}, {"uri": "x://1"}], "uri"),
        ("resourceTemplates", [{"uriTemplate": "x://{a}"}, {"uriTemplate": "x://{a}"}], "uriTemplate"),
    ],
)
def test_duplicate_keys_make_the_interface_invalid(kind, items, key):
    with pytest.raises(DuplicateComponentError, match=f"duplicate .* {key} .* at indexes 0 and 1"):
        Interface.from_document({kind: items})


def test_same_name_in_different_kinds_is_fine():
    interface = Interface.from_document({"tools": [{"name": "a"}], "prompts": [{"name": "a"}]})
    assert len(interface) == 2


@pytest.mark.parametrize("item", [{}, {"name": ""}, {"name": 3}, {"description": "no name"}])
def test_a_component_without_its_key_is_invalid(item):
    with pytest.raises(MissingKeyError, match="/tools/0"):
        Interface.from_document({"tools": [item]})


@pytest.mark.parametrize(
    "document",
    [[], "tools", {"tools": {"name": "a"}}, {"tools": ["a"]}, {"instructions": 7}, {"toolz": []}],
)
def test_wrong_shapes_are_malformed(document):
    with pytest.raises(MalformedInterfaceError):
        Interface.from_document(document)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf"), 10**400])
def test_non_finite_numbers_are_invalid(number):
    with pytest.raises(NonFiniteNumberError, match="/tools/0/inputSchema/maximum"):
        Interface.from_document({"tools": [{"name": "a", "inputSchema": {"maximum": number}}]})


def test_nan_in_json_text_is_refused_at_parse_time():
    with pytest.raises(NonFiniteNumberError):
        loads_strict('{"tools": [{"name": "a", "x": NaN}]}')


def test_nesting_deeper_than_the_limit_is_invalid_without_recursion_error():
    deep: dict = {}
    node = deep
    for _ in range(100_000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(NestingTooDeepError, match="deeper than 64"):
        Interface.from_document({"tools": [{"name": "a", "inputSchema": deep}]})


def test_payload_larger_than_the_limit_is_invalid():
    big = {"tools": [{"name": f"t{i}", "description": "x" * 1000} for i in range(200)]}
    with pytest.raises(PayloadTooLargeError):
        Interface.from_document(big, Limits(max_bytes=100_000))
    assert len(Interface.from_document(big)) == 200


def test_too_many_components_is_invalid():
    with pytest.raises(PayloadTooLargeError, match="more than 10 components"):
        Interface.from_document({"tools": [{"name": f"t{i}"} for i in range(11)]}, Limits(max_components=10))


def test_document_round_trip_sorts_lists_by_key():
    document = {"tools": [{"name": "b"}, {"name": "a"}]}
    assert Interface.from_document(document).to_document() == {"tools": [{"name": "a"}, {"name": "b"}]}
    assert json.loads(json.dumps(Interface.from_document(FULL).to_document()))["prompts"] == FULL["prompts"]


@pytest.mark.parametrize("document", [
    {"tools": [{"name": "a", "description": "x\ud800y"}]},
    {"tools": [{"name": "a", "inputSchema": {"\udfff": 1}}]},
])
def test_lone_surrogates_are_invalid_text(document):
    with pytest.raises(MalformedInterfaceError, match="lone UTF-16 surrogate"):
        Interface.from_document(document)


def test_error_pointers_name_the_exact_place():
    with pytest.raises(NonFiniteNumberError) as caught:
        Interface.from_document({"tools": [{"name": "a"}, {"name": "b/c", "inputSchema": {"p~q": [0, float("nan")]}}]})
    assert caught.value.pointer == "/tools/1/inputSchema/p~0q/1"
