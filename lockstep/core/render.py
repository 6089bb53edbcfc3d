"""Readable forms of drift findings: text for people, JSON for machines.

Text form, one block per finding::

    ~ tool/get_forecast [high] description, inputSchema
      * description gains invisible Unicode U+200B
      * widened schema: /inputSchema/properties/path added (accepts a new property)
        --- approved description
        +++ observed description
        @@ -1 +1 @@
        -Get the forecast.
        +Get the forecast.<U+200B>
        + /inputSchema/properties/path: {"type": "string"}
        - /inputSchema/required/1: "units"
        ~ /annotations/readOnlyHint: true -> false

Hidden characters (zero-width, bidirectional controls, tag characters) are
spelled out as ``<U+XXXX>`` everywhere, so that a reviewer sees them and a
terminal cannot be tricked into reordering the text.

This module reads findings by duck typing; their types come from
:mod:`lockstep.core.findings` (:mod:`lockstep.core.diff` re-exports these functions).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lockstep.core.severity import visible

if TYPE_CHECKING:
    from lockstep.core.findings import FieldChange, Finding

__all__ = ["render_json", "render_text"]

_SYMBOLS = {"added": "+", "removed": "-", "changed": "~"}
_RESET = "\x1b[0m"
_SEVERITY_COLORS = {"high": "\x1b[1;31m", "medium": "\x1b[33m", "low": "\x1b[36m"}
_LINE_COLORS = {"+": "\x1b[32m", "-": "\x1b[31m", "~": "\x1b[33m", "@": "\x1b[36m"}
_TEXT_TOKENS = frozenset({"description", "title"})
_VALUE_LIMIT = 160
_CONTEXT_LINES = 2


def render_json(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """Findings as JSON-ready dicts, details included."""
    return [finding.to_dict(details=True) for finding in findings]


def render_text(findings: Iterable[Finding], *, color: bool = False) -> str:
    """Findings as readable text, one block each; ``""`` when there are none."""
    painter = _Painter(color)
    lines: list[str] = []
    for finding in findings:
        lines += _finding_lines(finding, painter)
    return "".join(line + "\n" for line in lines)


class _Painter:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def paint(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.enabled and code else text

    def line(self, text: str) -> str:
        """Color a detail line by its leading symbol (+, -, ~, @@)."""
        return self.paint(text, _LINE_COLORS.get(text[:1], "")) if text[:1] in _LINE_COLORS else text


def _finding_lines(finding: Finding, painter: _Painter) -> list[str]:
    change = finding.change.value
    severity = finding.severity.value
    instructions = finding.kind.value == "instructions"
    ref = "instructions" if instructions else f"{finding.kind.value}/{visible(finding.name, lookalikes=True)}"
    header = f"{_SYMBOLS[change]} {ref} " + painter.paint(f"[{severity}]", _SEVERITY_COLORS[severity])
    if finding.fields and not instructions:
        header += " " + ", ".join(finding.fields)
    lines = [header]
    lines += [f"  * {visible(reason)}" for reason in finding.reasons]
    for detail in finding.details:
        lines += ["    " + painter.line(line) for line in _detail_lines(detail)]
    return lines


def _detail_lines(detail: FieldChange) -> list[str]:
    change = detail.change.value
    if detail.pointer == "" and change != "changed":
        return _whole_component_lines(detail) if change == "added" else []
    if change == "changed" and _is_text(detail):
        return _text_diff(detail.pointer, str(detail.old), str(detail.new))
    if change == "changed":
        return [f"~ {detail.pointer}: {_value(detail.old)} -> {_value(detail.new)}"]
    value = detail.new if change == "added" else detail.old
    return [f"{_SYMBOLS[change]} {detail.pointer}: {_value(value)}"]


def _is_text(detail: FieldChange) -> bool:
    if not isinstance(detail.old, str) or not isinstance(detail.new, str):
        return False
    last = detail.pointer.rsplit("/", 1)[-1]
    return detail.pointer == "" or last in _TEXT_TOKENS or "\n" in detail.old or "\n" in detail.new


def _text_diff(pointer: str, old: str, new: str) -> list[str]:
    """A unified diff of two texts in which every change shows: invisible characters are spelled out,
    and so are trailing blanks and, when nothing else differs, the line endings."""
    label = pointer[1:] or "instructions"
    old_lines, new_lines = _lines(old, endings=False), _lines(new, endings=False)
    if old_lines == new_lines:
        old_lines, new_lines = _lines(old, endings=True), _lines(new, endings=True)
    diff = difflib.unified_diff(old_lines, new_lines, fromfile=f"approved {label}", tofile=f"observed {label}",
                                lineterm="", n=_CONTEXT_LINES)
    return list(diff)


_TRAILING_BLANKS = re.compile(r"[ \t]+$")
_ENDINGS = {"\r\n": "<CR><LF>", "\n": "<LF>", "\r": "<CR>"}


def _lines(text: str, *, endings: bool) -> list[str]:
    """The text's lines, made visible; trailing blanks as <U+0020>/<U+0009>, line endings when asked."""
    lines = []
    for line in visible(text).splitlines(keepends=True) or [""]:
        body = line.rstrip("\r\n")
        body = _TRAILING_BLANKS.sub(lambda blanks: "".join(f"<U+{ord(c):04X}>" for c in blanks.group()), body)
        lines.append(body + (_ENDINGS.get(line[len(line.rstrip("\r\n")):], "") if endings else ""))
    return lines


def _whole_component_lines(detail: FieldChange) -> list[str]:
    """What a reviewer needs to see of a new component: its fields, text in full."""
    definition = detail.new
    if isinstance(definition, str):  # the instructions
        return [f"+ {line}" for line in visible(definition).splitlines() or [""]]
    if not isinstance(definition, dict):
        return [f"+ {_value(definition, limit=None)}"]
    lines = []
    for key, value in definition.items():
        if isinstance(value, str) and key in _TEXT_TOKENS:
            text_lines = visible(value).splitlines() or [""]
            lines.append(f"+ /{key}: {text_lines[0]}")
            lines += [f"+   {line}" for line in text_lines[1:]]
        else:
            lines.append(f"+ /{key}: {_value(value)}")
    return lines


def _value(value: Any, limit: int | None = _VALUE_LIMIT) -> str:
    text = visible(json.dumps(value, ensure_ascii=False, sort_keys=False))
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
