"""Revisions: an interface digest, with the definitions when they are known.

An approved revision in a CR may carry only digests (``snapshot
--digests-only``); an observed one usually carries its definitions too. The
diff works at field level where both sides have definitions, and at component
level otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockstep.core.digest import ComponentDigest, InterfaceDigest, digest_interface, ensure_formula
from lockstep.core.errors import FormulaError, MalformedInterfaceError
from lockstep.core.ignore import IgnoreRules
from lockstep.core.model import DEFAULT_LIMITS, Interface, Limits

__all__ = ["Revision", "RevisionMismatchError"]


class RevisionMismatchError(MalformedInterfaceError):
    """A revision whose definitions do not digest to the digests it claims."""

    reason = "DigestMismatch"


@dataclass(frozen=True)
class Revision:
    """One interface revision: its digests and, optionally, its definitions."""

    digest: InterfaceDigest
    interface: Interface | None = None

    @property
    def aggregate(self) -> str:
        return self.digest.digest

    @classmethod
    def of(cls, interface: Interface, ignore: IgnoreRules | Iterable[str] | None = None) -> Revision:
        return cls(digest_interface(interface, ignore), interface)

    @classmethod
    def from_spec(cls, entry: Mapping[str, Any], ignore: IgnoreRules | Iterable[str] | None = None,
                  limits: Limits = DEFAULT_LIMITS) -> Revision:
        """Parse one ``spec.approved[]`` entry and check that its digests agree with each other
        and with its definitions (when present). Raises an InterfaceError subclass."""
        if not isinstance(entry, Mapping):
            raise MalformedInterfaceError("an approved revision must be an object")
        formula = str(entry.get("formula", ""))
        try:
            ensure_formula(formula)
        except FormulaError as error:
            raise MalformedInterfaceError(str(error)) from None
        digest = entry.get("digest")
        components = entry.get("components")
        definitions = entry.get("definitions")
        interface = Interface.from_document(definitions, limits) if definitions is not None else None
        if components is not None:
            claimed = InterfaceDigest.from_components(
                (ComponentDigest.from_dict(item) for item in components), formula
            )
            if digest is not None and claimed.digest != digest:
                raise RevisionMismatchError(
                    f"approved revision {digest}: its components digest to {claimed.digest}"
                )
        elif interface is not None:
            claimed = digest_interface(interface, ignore)
        elif isinstance(digest, str):
            claimed = InterfaceDigest(digest, (), formula)
        else:
            raise MalformedInterfaceError("an approved revision needs a digest")
        if interface is not None:
            recomputed = digest_interface(interface, ignore)
            if recomputed.digest != claimed.digest:
                raise RevisionMismatchError(
                    f"approved revision {claimed.digest}: its definitions digest to {recomputed.digest}"
                )
        if digest is not None and digest != claimed.digest:
            raise RevisionMismatchError(f"approved revision {digest} does not match its own digests")
        return cls(claimed, interface)

    def to_spec(self, *, with_definitions: bool = True) -> dict[str, Any]:
        """The ``spec.approved[]`` entry for this revision."""
        entry = self.digest.to_dict()
        if with_definitions and self.interface is not None:
            entry["definitions"] = self.interface.to_document()
        return entry
