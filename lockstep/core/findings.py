"""What a diff finds: :class:`Finding` per differing component, with its :class:`FieldChange` details.

The records live apart from :mod:`lockstep.core.diff`, which computes them, so
that :mod:`lockstep.core.render`, which prints them, needs no import of the diff
(and the diff may re-export the renderers without an import circle).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockstep.core.model import ComponentKind
from lockstep.core.severity import Severity

__all__ = ["Change", "FieldChange", "Finding", "max_severity"]


class Change(str, enum.Enum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass(frozen=True)
class FieldChange:
    """One change inside a component, at a JSON pointer relative to the component.

    ``old`` is meaningful unless the change is ADDED, ``new`` unless it is REMOVED.
    The pointer of the instructions (a bare string) and of a whole added or
    removed component is ``""``.
    """

    pointer: str
    change: Change
    old: Any = None
    new: Any = None

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"pointer": self.pointer, "change": self.change.value}
        if self.change is not Change.ADDED:
            entry["old"] = self.old
        if self.change is not Change.REMOVED:
            entry["new"] = self.new
        return entry


@dataclass(frozen=True)
class Finding:
    """One component of the observed interface that differs from the approved one."""

    kind: ComponentKind
    name: str
    change: Change
    fields: tuple[str, ...]
    severity: Severity
    reasons: tuple[str, ...]
    details: tuple[FieldChange, ...] = field(default=(), compare=False)

    @property
    def ref(self) -> str:
        return f"{self.kind.value}/{self.name}"

    def to_dict(self, *, details: bool = False) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "kind": self.kind.value,
            "name": self.name,
            "change": self.change.value,
            "fields": list(self.fields),
            "severity": self.severity.value,
            "reasons": list(self.reasons),
        }
        if details:
            entry["details"] = [change.to_dict() for change in self.details]
        return entry


def max_severity(findings: Iterable[Finding]) -> Severity | None:
    """The highest severity among ``findings``; None when there are none."""
    return max((finding.severity for finding in findings), default=None)
