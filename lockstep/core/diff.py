"""The diff between an approved interface and an observed one.

Each component that differs becomes one :class:`Finding`: added, removed or
changed, the top-level fields that changed, a :class:`Severity` and short
reasons. Every difference of the digests is a finding; severity only ranks it
(the rules are in :mod:`lockstep.core.severity` and docs/severity.md).

Where both sides carry definitions the diff is field-level and each finding
holds :class:`FieldChange` details (JSON pointers inside the component, with
old and new values) for :func:`render_text`. Where a side carries digests only
(``snapshot --digests-only``), the diff names the changed components from their
digests and ranks them by the rules that need no definitions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from lockstep.core.canonical import canonical_json
from lockstep.core.digest import component_digest
from lockstep.core.errors import LockstepError
from lockstep.core.findings import Change, FieldChange, Finding, max_severity
from lockstep.core.ignore import IgnoreRules, parse_ignore_rules
from lockstep.core.model import Component, ComponentKind, Interface, escape_pointer_token
from lockstep.core.render import render_json, render_text
from lockstep.core.revision import Revision
from lockstep.core.severity import (
    Severity,
    annotation_risks,
    gain_reasons,
    gained_signals,
    json_equal,
    schema_widenings,
)

__all__ = [
    "Change",
    "FieldChange",
    "Finding",
    "Severity",
    "UncomparableRevisionsError",
    "closest_revision",
    "closest_with_findings",
    "diff_interfaces",
    "diff_revisions",
    "max_severity",
    "render_json",
    "render_text",
]

Ignore = IgnoreRules | Iterable[str] | None


class UncomparableRevisionsError(LockstepError):
    """Two revisions that differ but carry neither component digests nor definitions."""


# --------------------------------------------------------------------------- diffs

def diff_interfaces(approved: Interface, observed: Interface, ignore: Ignore = None) -> list[Finding]:
    """Field-level findings for every component that differs, after removing ignored fields."""
    rules = parse_ignore_rules(ignore)
    old = _by_key(approved, rules)
    new = _by_key(observed, rules)
    findings = []
    for key in old.keys() | new.keys():
        before, after = old.get(key), new.get(key)
        if before is not None and after is not None:
            if component_digest(before.kind, before.definition) == component_digest(after.kind, after.definition):
                continue
            findings.append(_changed(before, after))
        elif after is not None:
            findings.append(_added(after))
        elif before is not None:
            findings.append(_removed(before))
    return _ordered(findings)


def diff_revisions(approved: Revision, observed: Revision, ignore: Ignore = None) -> list[Finding]:
    """Findings for every component whose digest differs between two revisions.

    Field-level where both revisions carry definitions; component-level
    otherwise. The digests decide what differs, so a finding is never lost to
    ignore rules that differ from those the digests were made with.
    """
    if approved.digest.formula == observed.digest.formula and approved.aggregate == observed.aggregate:
        return []
    old_digests = {(entry.kind, entry.name): entry.digest for entry in approved.digest.components}
    new_digests = {(entry.kind, entry.name): entry.digest for entry in observed.digest.components}
    if not old_digests or not new_digests:
        return _unattributed(approved, observed)
    rules = parse_ignore_rules(ignore)
    old = _by_key(approved.interface, rules) if approved.interface is not None else None
    new = _by_key(observed.interface, rules) if observed.interface is not None else None
    findings = []
    for key in old_digests.keys() | new_digests.keys():
        before, after = old_digests.get(key), new_digests.get(key)
        if before == after:
            continue
        old_component = old.get(key) if old is not None else None
        new_component = new.get(key) if new is not None else None
        findings.append(_finding_for(key, before, after, old_component, new_component))
    return _ordered(findings)


def _finding_for(key: tuple[ComponentKind, str], before: str | None, after: str | None,
                 old: Component | None, new: Component | None) -> Finding:
    kind, name = key
    if before is None:
        return _added(new) if new is not None else _added_without_definition(kind, name)
    if after is None:
        return _removed(old) if old is not None else _finding(kind, name, Change.REMOVED, (), [], [])
    if old is not None and new is not None:
        finding = _changed(old, new)
        if finding.fields:
            return finding
    return _finding(kind, name, Change.CHANGED, (), [(Severity.MEDIUM, ("component digest differs; "
                                                      "definitions unavailable for a field-level diff"))], [])


def _unattributed(approved: Revision, observed: Revision) -> list[Finding]:
    """Drift between revisions of which one lists no component digests."""
    if approved.interface is not None and observed.interface is not None:
        return diff_interfaces(approved.interface, observed.interface)
    components = observed.digest.components or approved.digest.components
    if not components:
        raise UncomparableRevisionsError(
            f"revisions {approved.aggregate} and {observed.aggregate} differ and list no component digests"
        )
    reason = (Severity.MEDIUM, "one revision has an aggregate digest only; the changed components are unknown")
    return _ordered([_finding(entry.kind, entry.name, Change.CHANGED, (), [reason], [])
                     for entry in components])


def closest_revision(approved: Sequence[Revision], observed: Revision) -> Revision:
    """The approved revision that the observed one differs from least.

    Fewest findings first, then the lowest total severity; the first listed wins a tie.
    """
    return closest_with_findings(approved, observed)[0]


def closest_with_findings(approved: Sequence[Revision], observed: Revision,
                          ignore: Ignore = None) -> tuple[Revision, list[Finding] | None]:
    """The closest approved revision (as closest_revision chooses it) and the findings of the observed one
    against it under ``ignore`` (None: the two cannot be compared, UncomparableRevisionsError). Every
    candidate is diffed once; the winner again only when there are ignore rules, which the distance does
    not apply."""
    if not approved:
        raise ValueError("closest_revision needs at least one approved revision")
    best: tuple[tuple[int, int], Revision, list[Finding] | None] | None = None
    for revision in approved:
        try:
            findings: list[Finding] | None = diff_revisions(revision, observed)
        except UncomparableRevisionsError:
            findings = None
        distance = (1 << 30, 0) if findings is None else \
            (len(findings), sum(finding.severity.rank for finding in findings))
        if best is None or distance < best[0]:  # the first listed wins a tie
            best = (distance, revision, findings)
    assert best is not None
    _, closest, findings = best
    if findings is not None and parse_ignore_rules(ignore):
        findings = diff_revisions(closest, observed, ignore)
    return closest, findings


def _by_key(interface: Interface, rules: IgnoreRules) -> dict[tuple[ComponentKind, str], Component]:
    components = {}
    for component in interface:
        kept = rules.apply(component) if rules else component
        if kept is not None:
            components[(kept.kind, kept.name)] = kept
    return components


_KIND_ORDER = {kind: index for index, kind in enumerate(ComponentKind)}


def _ordered(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by kind and name, so output is stable."""
    return sorted(findings, key=lambda item: (-item.severity.rank, _KIND_ORDER[item.kind], item.name))


# --------------------------------------------------------------------------- one component

Rated = tuple[Severity, str]


def _finding(kind: ComponentKind, name: str, change: Change, fields: tuple[str, ...], rated: list[Rated],
             details: list[FieldChange]) -> Finding:
    if not rated:
        rated = [(Severity.MEDIUM, f"{kind.value} {change.value}")]
    ranked = sorted(rated, key=lambda item: -item[0].rank)
    reasons = tuple(dict.fromkeys(reason for _, reason in ranked))
    return Finding(kind, name, change, fields, ranked[0][0], reasons, tuple(details))


def _added(component: Component) -> Finding:
    kind = component.kind
    rated: list[Rated] = [(Severity.HIGH, "new tool") if kind is ComponentKind.TOOL
                          else (Severity.MEDIUM, f"new {kind.value}")]
    rated += [(Severity.HIGH, reason) for reason in gain_reasons(
        gained_signals(None, component.definition), lambda pointer: _label(kind, pointer))]
    return _finding(kind, component.name, Change.ADDED, (), rated,
                    [FieldChange("", Change.ADDED, new=component.definition)])


def _added_without_definition(kind: ComponentKind, name: str) -> Finding:
    rated = [(Severity.HIGH, "new tool") if kind is ComponentKind.TOOL else (Severity.MEDIUM, f"new {kind.value}")]
    return _finding(kind, name, Change.ADDED, (), rated, [])


def _removed(component: Component) -> Finding:
    return _finding(component.kind, component.name, Change.REMOVED, (),
                    [(Severity.MEDIUM, f"{component.kind.value} removed")],
                    [FieldChange("", Change.REMOVED, old=component.definition)])


def _changed(old: Component, new: Component) -> Finding:
    details = pointer_changes(old.definition, new.definition)
    if isinstance(old.definition, str) or isinstance(new.definition, str):
        fields: tuple[str, ...] = (old.kind.value,)
    else:
        fields = tuple(sorted({_top_field(change.pointer) for change in details}))
    rated: list[Rated] = [(Severity.HIGH, reason) for reason in gain_reasons(
        gained_signals(old.definition, new.definition), lambda pointer: _label(new.kind, pointer))]
    explained: set[str] = set()
    if new.kind is ComponentKind.TOOL and isinstance(old.definition, dict) and isinstance(new.definition, dict):
        risks = annotation_risks(old.definition.get("annotations"), new.definition.get("annotations"))
        widenings = schema_widenings(old.definition.get("inputSchema"), new.definition.get("inputSchema"),
                                     "/inputSchema")
        rated += [(Severity.HIGH, f"tool {reason}") for reason in risks]
        rated += [(Severity.HIGH, f"widened schema: {reason}") for reason in widenings]
        explained |= {"annotations"} if risks else set()
        explained |= {"inputSchema"} if widenings else set()
    rated += [_rate_field(new.kind, name, _field(old.definition, name), _field(new.definition, name))
              for name in fields if name not in explained]
    return _finding(new.kind, new.name, Change.CHANGED, fields, rated, details)


_ABSENT = object()


def _field(definition: Any, name: str) -> Any:
    if isinstance(definition, str):
        return definition
    return definition.get(name, _ABSENT) if isinstance(definition, dict) else _ABSENT


_TEXT_FIELDS = frozenset({"description", "title", "instructions"})
_LOW_FIELDS = frozenset({"icons"})
_FIELD_NOUNS = {
    "inputSchema": "inputSchema changed without accepting more (narrowed or restated)",
    "outputSchema": "outputSchema changed",
    "annotations": "annotations changed",
    "arguments": "prompt arguments changed",
    "mimeType": "mimeType changed",
    "_meta": "_meta changed",
}


def _rate_field(kind: ComponentKind, name: str, old: Any, new: Any) -> Rated:
    """The severity of one changed top-level field by the rules that need no text signals."""
    if old is _ABSENT or new is _ABSENT:
        verb = "added" if old is _ABSENT else "removed"
        return (Severity.LOW if name in _LOW_FIELDS else Severity.MEDIUM, f"{name} {verb}")
    if name in _LOW_FIELDS:
        return Severity.LOW, f"{name} changed (cosmetic)"
    if name in _TEXT_FIELDS and isinstance(old, str) and isinstance(new, str):
        if old.split() == new.split():
            return Severity.LOW, f"{name} changes whitespace only"
        return Severity.MEDIUM, f"{name} reworded"
    return Severity.MEDIUM, _FIELD_NOUNS.get(name, f"{name} changed")


def _top_field(pointer: str) -> str:
    token = pointer[1:].split("/", 1)[0]
    return token.replace("~1", "/").replace("~0", "~")


def _label(kind: ComponentKind, pointer: str) -> str:
    """A short name for where a signal appears: ``description``, ``inputSchema/properties/x/description``."""
    if not pointer:
        return kind.value if kind is ComponentKind.INSTRUCTIONS else "definition"
    return pointer[1:]


# --------------------------------------------------------------------------- pointer diff

def pointer_changes(old: Any, new: Any, pointer: str = "") -> list[FieldChange]:
    """The changes between two JSON values as a list of JSON-pointer changes.

    Objects compare key by key. Lists of scalars compare as multisets (a removed
    value is reported at its old index, an added one at its new index; a pure
    reordering is one change of the whole list); other lists compare index by index.
    """
    if json_equal(old, new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[FieldChange] = []
        for key in list(old) + [key for key in new if key not in old]:
            child = f"{pointer}/{escape_pointer_token(key)}"
            if key not in new:
                changes.append(FieldChange(child, Change.REMOVED, old=old[key]))
            elif key not in old:
                changes.append(FieldChange(child, Change.ADDED, new=new[key]))
            else:
                changes += pointer_changes(old[key], new[key], child)
        return changes
    if isinstance(old, list) and isinstance(new, list):
        if all(not isinstance(item, (dict, list)) for item in old + new):
            return _scalar_list_changes(old, new, pointer)
        changes = []
        for index in range(max(len(old), len(new))):
            child = f"{pointer}/{index}"
            if index >= len(new):
                changes.append(FieldChange(child, Change.REMOVED, old=old[index]))
            elif index >= len(old):
                changes.append(FieldChange(child, Change.ADDED, new=new[index]))
            else:
                changes += pointer_changes(old[index], new[index], child)
        return changes
    return [FieldChange(pointer, Change.CHANGED, old=old, new=new)]


def _scalar_list_changes(old: list[Any], new: list[Any], pointer: str) -> list[FieldChange]:
    old_keys = [canonical_json(item) for item in old]
    new_keys = [canonical_json(item) for item in new]
    removed = Counter(old_keys) - Counter(new_keys)
    added = Counter(new_keys) - Counter(old_keys)
    if not removed and not added:
        return [FieldChange(pointer, Change.CHANGED, old=old, new=new)]
    changes = []
    for index, key in enumerate(old_keys):
        if removed[key] > 0:
            removed[key] -= 1
            changes.append(FieldChange(f"{pointer}/{index}", Change.REMOVED, old=old[index]))
    for index, key in enumerate(new_keys):
        if added[key] > 0:
            added[key] -= 1
            changes.append(FieldChange(f"{pointer}/{index}", Change.ADDED, new=new[index]))
    return changes
