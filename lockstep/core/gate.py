"""The component gate: is one component, as a client receives it, approved?

Where the judge compares a whole observed interface with an approved revision, the gate
looks at one component at a time, as it passes on the wire (the proxy). A component key
may have several approved definitions: every definition of that key in any approved
revision is accepted, so a server whose lists vary by the caller's authorization (one
view per principal) passes when each component each caller receives is approved in some
view. Components are digested with the same formula and ignore rules as the revisions::

    gate = ComponentGate.of(pinned.revisions, pinned.ignore)
    verdict = gate.check(ComponentKind.TOOL, {"name": "get_forecast", "description": ...})
    verdict.approved, verdict.reason, verdict.digest
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockstep.core.digest import ComponentDigest, component_digest
from lockstep.core.errors import InterfaceError
from lockstep.core.ignore import IgnoreRules, parse_ignore_rules
from lockstep.core.model import INSTRUCTIONS_NAME, Component, ComponentKind
from lockstep.core.revision import Revision

__all__ = ["ComponentGate", "GateReason", "Verdict"]


class GateReason(str, enum.Enum):
    """Why a component is withheld. Values appear in errors, logs, metrics and the CR."""

    APPROVED = "Approved"
    #: The key is approved, but not with this definition (a rug pull, or an unapproved view).
    CHANGED = "Changed"
    #: No approved revision has a component of this kind with this key.
    UNAPPROVED = "Unapproved"
    #: Not a component at all: not an object, no key, a value the canonical form refuses.
    INVALID = "Invalid"


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one component as received."""

    kind: ComponentKind
    key: str
    reason: GateReason
    #: The ``lockstep/v1`` digest of the definition received ("" when it could not be digested).
    digest: str
    #: The approved digests of this key (several when views differ), sorted.
    approved_digests: tuple[str, ...]
    detail: str = ""

    @property
    def approved(self) -> bool:
        return self.reason is GateReason.APPROVED

    @property
    def ref(self) -> str:
        return f"{self.kind.value}/{self.key}"

    @property
    def short_digest(self) -> str:
        """The digest cut to ``sha256:`` and 12 hex digits ("?" when the definition could not be digested)."""
        return self.digest[:19] if self.digest else "?"

    def describe(self, index: int | None = None) -> str:
        """One line for an error a client gets: the kind, the place in its list (``index``), the digest and
        why. Never the key or other text the server chose: agents hand tool errors to their model, and a
        name is as much the server's words as a description (logs and findings carry :attr:`ref`)."""
        where = self.kind.value if index is None or index < 0 else f"{self.kind.value} #{index}"
        if self.reason is GateReason.CHANGED:
            return f"{where} ({self.short_digest}) differs from its approved definition"
        if self.reason is GateReason.UNAPPROVED:
            return f"{where} ({self.short_digest}) is not in any approved revision"
        if self.reason is GateReason.INVALID:
            return f"{where} is not a valid component"
        return f"{where} ({self.short_digest}) is approved"


class ComponentGate:
    """The approved digests of every component key, from one or more approved revisions."""

    def __init__(self, approved: Mapping[tuple[ComponentKind, str], frozenset[str]], ignore: IgnoreRules) -> None:
        self._approved = dict(approved)
        self._ignore = ignore

    @classmethod
    def of(cls, revisions: Iterable[Revision], ignore: IgnoreRules | Iterable[str] | None = None) -> ComponentGate:
        return cls.of_components((component for revision in revisions for component in revision.digest.components),
                                 ignore)

    @classmethod
    def of_components(cls, components: Iterable[ComponentDigest],
                      ignore: IgnoreRules | Iterable[str] | None = None) -> ComponentGate:
        """The gate that passes these component digests (the operator's answer to a proxy's report)."""
        approved: dict[tuple[ComponentKind, str], set[str]] = {}
        for component in components:
            approved.setdefault((component.kind, component.name), set()).add(component.digest)
        return cls({key: frozenset(digests) for key, digests in approved.items()}, parse_ignore_rules(ignore))

    def approved_digests(self, kind: ComponentKind, key: str) -> tuple[str, ...]:
        return tuple(sorted(self._approved.get((kind, key), ())))

    def check(self, kind: ComponentKind, definition: Any) -> Verdict:
        """Judge one list item (or, for instructions, the instructions string) as received."""
        key = _key_of(kind, definition)
        if key is None:
            return Verdict(kind, "?", GateReason.INVALID, "", (), f"no {kind.key_field!r} string")
        approved = self.approved_digests(kind, key)
        # No separate walk for the model's limits (depth, string and total size): a definition whose digest
        # is approved equals an approved definition, which met them; any other is withheld either way. The
        # canonical form itself refuses what is not JSON (NaN, a lone surrogate, a foreign type).
        try:
            kept = self._ignore.apply(Component(kind, key, definition)) if self._ignore else None
            if self._ignore and kept is None:  # an ignore rule drops the whole component (instructions)
                return Verdict(kind, key, GateReason.APPROVED, "", approved, "ignored")
            digest = component_digest(kind, kept.definition if kept is not None else definition)
        except InterfaceError as error:
            return Verdict(kind, key, GateReason.INVALID, "", approved, str(error))
        except RecursionError:
            return Verdict(kind, key, GateReason.INVALID, "", approved, "nested too deep to digest")
        if digest in approved:
            return Verdict(kind, key, GateReason.APPROVED, digest, approved)
        reason = GateReason.CHANGED if approved else GateReason.UNAPPROVED
        return Verdict(kind, key, reason, digest, approved)


def _key_of(kind: ComponentKind, definition: Any) -> str | None:
    if kind is ComponentKind.INSTRUCTIONS:
        return INSTRUCTIONS_NAME if isinstance(definition, str) else None
    if not isinstance(definition, Mapping):
        return None
    key = definition.get(kind.key_field or "")
    return key if isinstance(key, str) else None
