"""Digests of an interface, formula ``lockstep/v1`` (specified in docs/digest.md).

    component digest = sha256( "lockstep/v1" 0x00 kind 0x00 JCS(definition) )
    aggregate digest = sha256( "lockstep/v1" 0x00 "interface" 0x00
                               JCS(sorted list of the component digests' text forms) )

``kind`` is the component kind's name (``tool``, ``prompt``, ``resource``,
``resourceTemplate``, ``instructions``) in ASCII; ``JCS`` is RFC 8785; the text
form of a digest is ``sha256:`` followed by 64 lower-case hex digits. Sorting
makes the aggregate independent of list order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockstep.core.canonical import canonical_json
from lockstep.core.errors import FormulaError, MalformedInterfaceError
from lockstep.core.ignore import IgnoreRules, parse_ignore_rules
from lockstep.core.model import Component, ComponentKind, Interface

__all__ = [
    "FORMULA",
    "ComponentDigest",
    "InterfaceDigest",
    "component_digest",
    "digest_interface",
]

FORMULA = "lockstep/v1"
KNOWN_FORMULAS = frozenset({FORMULA})
DIGEST_PREFIX = "sha256:"
_AGGREGATE_DOMAIN = "interface"


@dataclass(frozen=True, order=True)
class ComponentDigest:
    """The digest of one component, as listed in a CR's ``components``."""

    kind: ComponentKind
    name: str
    digest: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "name": self.name, "digest": self.digest}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ComponentDigest:
        try:
            return cls(ComponentKind(data["kind"]), str(data["name"]), str(data["digest"]))
        except (KeyError, ValueError, TypeError) as error:
            raise MalformedInterfaceError(f"bad component digest entry {data!r}: {error}") from None


@dataclass(frozen=True)
class InterfaceDigest:
    """The aggregate digest of an interface and the digests of its components."""

    digest: str
    components: tuple[ComponentDigest, ...]
    formula: str = FORMULA

    def component(self, kind: ComponentKind, name: str) -> ComponentDigest | None:
        for entry in self.components:
            if entry.kind is kind and entry.name == name:
                return entry
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "formula": self.formula,
            "components": [entry.to_dict() for entry in self.components],
        }

    @classmethod
    def from_components(cls, components: Iterable[ComponentDigest], formula: str = FORMULA) -> InterfaceDigest:
        """Rebuild an InterfaceDigest (and its aggregate) from component digests."""
        ensure_formula(formula)
        ordered = tuple(sorted(components, key=lambda entry: (entry.kind.value, entry.name)))
        return cls(aggregate_digest(entry.digest for entry in ordered), ordered, formula)


def ensure_formula(formula: str) -> None:
    if formula not in KNOWN_FORMULAS:
        raise FormulaError(
            f"unknown digest formula {formula!r}; this Lockstep knows {', '.join(sorted(KNOWN_FORMULAS))}"
        )


def _sha256(*parts: bytes) -> str:
    return DIGEST_PREFIX + hashlib.sha256(b"".join(parts)).hexdigest()


def component_digest(kind: ComponentKind, definition: Any) -> str:
    """The ``lockstep/v1`` digest of one component's definition.

    Raises an InterfaceError (NonFiniteNumberError, MalformedInterfaceError) for a
    definition that is not canonical JSON, such as one holding a lone surrogate."""
    return _sha256(FORMULA.encode(), b"\x00", kind.value.encode(), b"\x00", canonical_json(definition))


def aggregate_digest(component_digests: Iterable[str]) -> str:
    """The order-independent ``lockstep/v1`` aggregate of component digests."""
    return _sha256(
        FORMULA.encode(), b"\x00", _AGGREGATE_DOMAIN.encode(), b"\x00", canonical_json(sorted(component_digests))
    )


def digest_interface(interface: Interface, ignore: IgnoreRules | Iterable[str] | None = None) -> InterfaceDigest:
    """Digest every component of ``interface`` after removing ignored fields.

    Raises IgnoreRuleError for a bad rule, and an InterfaceError for a definition that
    ``canonical_json`` refuses (the model's validation does not check for lone surrogates)."""
    rules = parse_ignore_rules(ignore)
    entries = []
    for component in interface:
        kept: Component | None = rules.apply(component) if rules else component
        if kept is not None:
            entries.append(ComponentDigest(kept.kind, kept.name, component_digest(kept.kind, kept.definition)))
    return InterfaceDigest.from_components(entries)
