"""Successes that say what they did, and text diffs in which every change shows (issue 12): before,
`diff` of identical inputs and `hash --save` printed nothing, and a trailing space added to a description
was invisible in the text diff."""

from __future__ import annotations

import copy
import json

TOOL = {"name": "get_forecast", "description": "Forecast for a city.", "inputSchema": {"type": "object"}}


def test_diff_of_identical_inputs_says_so(invoke, write):
    same = {"tools": [TOOL]}
    result = invoke("diff", write("a.json", same), write("b.json", same))
    assert result.exit_code == 0 and result.stdout.startswith("no differences: ") and "sha256:" in result.stdout


def test_hash_save_says_where_it_saved(invoke, write, tmp_path):
    saved = tmp_path / "saved.json"
    result = invoke("hash", write("a.json", {"tools": [TOOL]}), "--save", str(saved))
    assert result.exit_code == 0 and f"to {saved}" in result.stderr
    assert json.loads(saved.read_text())["tools"][0]["name"] == "get_forecast"


def test_a_trailing_space_shows_in_the_text_diff(invoke, write):
    spaced = copy.deepcopy(TOOL)
    spaced["description"] += " "
    result = invoke("diff", write("a.json", {"tools": [TOOL]}), write("b.json", {"tools": [spaced]}))
    assert result.exit_code == 1
    assert "+Forecast for a city.<U+0020>" in result.stdout


def test_a_changed_line_ending_shows_in_the_text_diff(invoke, write):
    windows = copy.deepcopy(TOOL)
    windows["description"] = "Forecast.\r\nFor a city."
    unix = copy.deepcopy(TOOL)
    unix["description"] = "Forecast.\nFor a city."
    result = invoke("diff", write("a.json", {"tools": [unix]}), write("b.json", {"tools": [windows]}))
    assert result.exit_code == 1
    assert "+Forecast.<CR><LF>" in result.stdout and "-Forecast.<LF>" in result.stdout
