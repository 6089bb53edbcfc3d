"""Severity rules: how risky one change of an MCP interface looks to a reviewer.

Every unapproved change is drift; severity only ranks it for review and
alerting (docs/severity.md explains the rules, with examples). This module
holds the rules that need the definitions:

* :func:`text_signals` finds what makes text dangerous for a model to read:
  invisible or bidirectional Unicode, Unicode tag characters, look-alike
  characters, markup, instruction-like phrases (:data:`INSTRUCTION_PHRASES`,
  the one list of them) and URLs. :func:`gained_signals` keeps those that a
  new definition has and the old one has not.
* :func:`schema_widenings` names the ways a new JSON Schema accepts more than
  the old one (new properties, fewer required, looser bounds, ...).
* :func:`annotation_risks` names the tool annotation flips that matter
  (read-only lost, destructive gained, open world gained).

The rules sit in three modules, one per subject, and this one re-exports
their public names (import them from here or from where they live):
:mod:`lockstep.core.signals` (text), :mod:`lockstep.core.schema_widening`
(schemas) and this module (annotations, and :class:`Severity` itself).
:func:`json_equal` lives in :mod:`lockstep.core.canonical`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from lockstep.core.canonical import json_equal
from lockstep.core.schema_widening import schema_widenings
from lockstep.core.signals import (
    INSTRUCTION_PHRASES,
    Phrase,
    TextSignal,
    gain_reasons,
    gained_signals,
    hidden_characters,
    text_signals,
    visible,
)
from lockstep.core.wording import json_scalar

__all__ = [
    "INSTRUCTION_PHRASES",
    "Phrase",
    "Severity",
    "TextSignal",
    "annotation_risks",
    "gain_reasons",
    "gained_signals",
    "hidden_characters",
    "json_equal",
    "schema_widenings",
    "text_signals",
    "visible",
]


class Severity(str, enum.Enum):
    """How risky a finding looks. Compare with ``<``/``>=`` (by :attr:`rank`), never as strings."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank >= other.rank

    __hash__ = str.__hash__


_RANKS = {Severity.LOW: 0, Severity.MEDIUM: 1, Severity.HIGH: 2}


# --------------------------------------------------------------------------- annotations

def annotation_risks(old: Any, new: Any) -> list[str]:
    """Reasons why a tool's new annotations are riskier than the old ones (MCP defaults applied).

    Defaults from the MCP specification: readOnlyHint false, destructiveHint true
    (meaningful only when not read-only), openWorldHint true.
    """
    old_hints = old if isinstance(old, Mapping) else {}
    new_hints = new if isinstance(new, Mapping) else {}
    reasons = []
    was_read_only = old_hints.get("readOnlyHint") is True
    is_read_only = new_hints.get("readOnlyHint") is True
    if was_read_only and not is_read_only:
        reasons.append(f"stops being read-only (readOnlyHint: true -> {_hint(new_hints, 'readOnlyHint')})")
    if _destructive(new_hints) and not _destructive(old_hints):
        source = "destructiveHint absent defaults to true" if "destructiveHint" not in new_hints else (
            f"destructiveHint: {_hint(old_hints, 'destructiveHint')} -> true")
        reasons.append(f"becomes destructive ({source})")
    if _open_world(new_hints) and not _open_world(old_hints):
        reasons.append(f"becomes open-world (openWorldHint: false -> {_hint(new_hints, 'openWorldHint')})")
    return reasons


def _destructive(hints: Mapping[str, Any]) -> bool:
    if hints.get("readOnlyHint") is True:
        return False
    return hints.get("destructiveHint", True) is True


def _open_world(hints: Mapping[str, Any]) -> bool:
    return hints.get("openWorldHint", True) is True


def _hint(hints: Mapping[str, Any], name: str) -> str:
    return "absent" if name not in hints else json_scalar(hints[name])
