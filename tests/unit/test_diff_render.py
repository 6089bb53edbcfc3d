"""The readable forms of findings: text (with and without color) and JSON."""

from __future__ import annotations

import json
from typing import Any

from lockstep.core.diff import diff_interfaces, render_json, render_text
from lockstep.core.model import Interface

APPROVED: dict[str, Any] = {
    "instructions": "Weather tools.\nUse them kindly.",
    "tools": [
        {
            "name": "get_forecast",
            "description": "Get the forecast.\nCities only.",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}, "units": {}},
                            "required": ["city", "units"]},
            "annotations": {"readOnlyHint": True},
        },
        {"name": "old_tool", "inputSchema": {"type": "object"}},
    ],
}
OBSERVED: dict[str, Any] = {
    "instructions": "Weather tools.\nUse them kindly.",
    "tools": [
        {
            "name": "get_forecast",
            "description": "Get the forecast\u200b.\nCities only.",
            "inputSchema": {"type": "object",
                            "properties": {"city": {"type": "string"}, "units": {}, "path": {"type": "string"}},
                            "required": ["city"]},
            "annotations": {"readOnlyHint": False},
        },
        {"name": "new_tool", "description": "Deletes\u202e things.", "inputSchema": {"type": "object"}},
    ],
}


def rendered(color: bool = False) -> str:
    findings = diff_interfaces(Interface.from_document(APPROVED), Interface.from_document(OBSERVED))
    return render_text(findings, color=color)


def block(text: str, header_start: str) -> list[str]:
    """The lines of the block whose header starts with ``header_start``."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(header_start))
    end = next((index for index in range(start + 1, len(lines)) if not lines[index].startswith(" ")), len(lines))
    return lines[start:end]


def test_changed_tool_block_has_header_reasons_text_diff_and_pointers() -> None:
    lines = block(rendered(), "~ tool/get_forecast")
    assert lines[0] == "~ tool/get_forecast [high] annotations, description, inputSchema"
    assert "  * description gains invisible Unicode U+200B" in lines
    assert "  * tool stops being read-only (readOnlyHint: true -> false)" in lines
    assert "    --- approved description" in lines
    assert "    +++ observed description" in lines
    assert "    -Get the forecast." in lines
    assert "    +Get the forecast<U+200B>." in lines
    assert "     Cities only." in lines  # unchanged context line
    assert '    + /inputSchema/properties/path: {"type": "string"}' in lines
    assert '    - /inputSchema/required/1: "units"' in lines
    assert "    ~ /annotations/readOnlyHint: true -> false" in lines


def test_added_and_removed_tools_and_hidden_characters_are_spelled_out() -> None:
    text = rendered()
    added = block(text, "+ tool/new_tool")
    assert added[0] == "+ tool/new_tool [high]"
    assert "  * new tool" in added
    assert "    + /description: Deletes<U+202E> things." in added
    assert block(text, "- tool/old_tool") == ["- tool/old_tool [medium]", "  * tool removed"]
    assert "\u202e" not in text and "\u200b" not in text


def test_most_severe_findings_come_first_and_unchanged_components_are_absent() -> None:
    headers = [line for line in rendered().splitlines() if not line.startswith(" ")]
    assert headers == [
        "~ tool/get_forecast [high] annotations, description, inputSchema",
        "+ tool/new_tool [high]",
        "- tool/old_tool [medium]",
    ]


def test_instructions_render_as_a_text_diff() -> None:
    old = Interface.from_document({"instructions": "Line one.\nLine two."})
    new = Interface.from_document({"instructions": "Line one.\nLine 2."})
    lines = render_text(diff_interfaces(old, new)).splitlines()
    assert lines[0] == "~ instructions [medium]"
    assert lines[1:] == ["  * instructions reworded", "    --- approved instructions",
                         "    +++ observed instructions", "    @@ -1,2 +1,2 @@", "     Line one.",
                         "    -Line two.", "    +Line 2."]


def test_color_off_has_no_escape_codes_and_color_on_paints_severity_and_lines() -> None:
    plain, colored = rendered(color=False), rendered(color=True)
    assert "\x1b[" not in plain
    assert "~ tool/get_forecast \x1b[1;31m[high]\x1b[0m annotations" in colored
    assert "- tool/old_tool \x1b[33m[medium]\x1b[0m" in colored
    assert '    \x1b[32m+ /inputSchema/properties/path: {"type": "string"}\x1b[0m' in colored
    assert '    \x1b[31m- /inputSchema/required/1: "units"\x1b[0m' in colored
    stripped = colored
    for code in ("\x1b[1;31m", "\x1b[33m", "\x1b[32m", "\x1b[31m", "\x1b[36m", "\x1b[0m"):
        stripped = stripped.replace(code, "")
    assert stripped == plain


def test_no_findings_render_as_nothing() -> None:
    assert render_text([]) == ""
    assert render_json([]) == []


def test_json_form_is_serialisable_and_carries_details() -> None:
    findings = diff_interfaces(Interface.from_document(APPROVED), Interface.from_document(OBSERVED))
    entries = json.loads(json.dumps(render_json(findings)))
    forecast = next(entry for entry in entries if entry["name"] == "get_forecast")
    assert {key: forecast[key] for key in ("kind", "change", "severity", "fields")} == {
        "kind": "tool", "change": "changed", "severity": "high",
        "fields": ["annotations", "description", "inputSchema"]}
    assert {"pointer": "/annotations/readOnlyHint", "change": "changed", "old": True, "new": False} in forecast[
        "details"]
    assert {"pointer": "/inputSchema/required/1", "change": "removed", "old": "units"} in forecast["details"]
    assert set(findings[0].to_dict()) == {"kind", "name", "change", "fields", "severity", "reasons"}


def test_lookalike_letters_in_names_and_tag_runs_are_spelled_out() -> None:
    schema = {"type": "object"}
    old = Interface.from_document({"tools": [{"name": "read_file", "inputSchema": schema}]})
    new = Interface.from_document({"tools": [{"name": "re\u0430d_file", "inputSchema": schema,
                                              "description": "Reads." + "".join(chr(0xE0000 + ord(c)) for c in "hi")}]})
    headers = [line for line in render_text(diff_interfaces(old, new)).splitlines() if not line.startswith(" ")]
    assert headers == ["+ tool/re<U+0430>d_file [high]", "- tool/read_file [medium]"]
    text = render_text(diff_interfaces(old, new))
    assert "    + /description: Reads.<TAG 'hi'>" in text.splitlines()
    assert "  * description gains Unicode tag characters hiding 'hi'" in text.splitlines()


def test_new_instructions_render_line_by_line() -> None:
    new = Interface.from_document({"instructions": "Use the tools.\nSee https://docs.example/."})
    lines = render_text(diff_interfaces(Interface.from_document({}), new)).splitlines()
    assert lines == ["+ instructions [high]", "  * instructions gains URL https://docs.example/",
                     "  * new instructions", "    + Use the tools.", "    + See https://docs.example/."]
