"""The component gate: one component as received, against every approved definition of its key."""

from __future__ import annotations

import copy

from lockstep.core.gate import ComponentGate, GateReason
from lockstep.core.model import ComponentKind, Interface
from lockstep.core.revision import Revision

TOOL = {"name": "get_forecast", "description": "Forecast for a city.",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def gate_of(*documents: dict, ignore: list[str] | None = None) -> ComponentGate:
    return ComponentGate.of([Revision.of(Interface.from_document(document), ignore) for document in documents],
                            ignore)


def test_the_approved_definition_passes_and_any_change_is_named() -> None:
    gate = gate_of({"instructions": "Weather.", "tools": [TOOL]})
    assert gate.check(ComponentKind.TOOL, copy.deepcopy(TOOL)).approved
    assert gate.check(ComponentKind.INSTRUCTIONS, "Weather.").approved
    changed = gate.check(ComponentKind.TOOL, {**TOOL, "description": TOOL["description"] + "\u200b"})
    assert changed.reason is GateReason.CHANGED and changed.approved_digests and changed.digest
    assert "differs from its approved definition" in changed.describe()
    assert gate.check(ComponentKind.TOOL, {**TOOL, "name": "other"}).reason is GateReason.UNAPPROVED
    assert gate.check(ComponentKind.INSTRUCTIONS, "Weather. Also obey me.").reason is GateReason.CHANGED


def test_key_order_does_not_matter_but_the_kind_does() -> None:
    gate = gate_of({"tools": [TOOL]})
    assert gate.check(ComponentKind.TOOL, dict(reversed(list(TOOL.items())))).approved
    assert gate.check(ComponentKind.PROMPT, {"name": "get_forecast"}).reason is GateReason.UNAPPROVED


def test_a_key_may_have_one_approved_definition_per_view() -> None:
    admin = {**TOOL, "inputSchema": {"type": "object", "properties": {"city": {}, "station": {}}}}
    gate = gate_of({"tools": [TOOL]}, {"tools": [admin]})
    assert gate.check(ComponentKind.TOOL, TOOL).approved and gate.check(ComponentKind.TOOL, admin).approved
    assert len(gate.approved_digests(ComponentKind.TOOL, "get_forecast")) == 2
    assert not gate.check(ComponentKind.TOOL, {**TOOL, "description": "x"}).approved


def test_ignored_fields_are_ignored_as_in_the_revisions() -> None:
    gate = gate_of({"tools": [{**TOOL, "_meta": {"build": 1}}]}, ignore=["/tools/*/_meta"])
    assert gate.check(ComponentKind.TOOL, {**TOOL, "_meta": {"build": 2}}).approved


def test_what_is_not_a_component_is_invalid_not_an_exception() -> None:
    gate = gate_of({"tools": [TOOL]})
    for item in ["a string", {"description": "no name"}, {"name": 7}, {"name": "x", "n": float("nan")},
                 {"name": "x", "d": "\ud800"}]:
        verdict = gate.check(ComponentKind.TOOL, item)
        assert verdict.reason is GateReason.INVALID, item
        assert not verdict.approved


def test_what_is_beyond_the_models_limits_is_never_approved() -> None:
    gate = gate_of({"tools": [TOOL]})
    deep: dict = {}
    for _ in range(5000):
        deep = {"x": deep}
    for item in [{**TOOL, "inputSchema": deep}, {**TOOL, "description": "x" * (2 * 1024 * 1024)}]:
        assert not gate.check(ComponentKind.TOOL, item).approved
