"""lockstep.core.approval: the pure edits behind `lockstep approve`, on plain manifests."""

from __future__ import annotations

import copy

import pytest
from lockstep_testing.interfaces import WEATHER

from lockstep.core import Interface
from lockstep.core.approval import (
    AmbiguousRevisionError,
    ApprovalError,
    DigestMismatchError,
    NoDefinitionsError,
    NotAManifestError,
    ObservedRevision,
    UnknownRevisionError,
    approve,
    observed_revisions,
    prune_unserved,
    select_revision,
    verified_interface,
)
from lockstep.core.manifest import build_manifest, load_pinned
from lockstep.core.revision import Revision

OLD = Interface.from_document(WEATHER)
NEW_DOCUMENT = copy.deepcopy(WEATHER)
NEW_DOCUMENT["tools"][1]["description"] = "Active alerts for a state, with their severity."
NEW = Interface.from_document(NEW_DOCUMENT)


def observed(interface: Interface, *, approved: bool = False, ignore: list[str] | None = None,
             **changes: object) -> dict[str, object]:
    revision = Revision.of(interface, ignore)
    entry = {**revision.digest.to_dict(), "approved": approved, "pods": ["p1"], "podCount": 1,
             "firstSeen": "2026-11-22T02:00:00Z"}
    if not approved:
        entry["definitions"] = interface.to_document()
    entry.update(changes)
    return entry


def manifest(*interfaces: Interface, ignore: list[str] | None = None) -> dict[str, object]:
    built = build_manifest(Revision.of(interfaces[0], ignore), name="weather", ignore=ignore)
    built["spec"]["approved"] = [Revision.of(item, ignore).to_spec() for item in interfaces]
    return built


def test_select_by_prefix_or_the_only_unapproved_one():
    entries = observed_revisions({"status": {"observed": [observed(OLD, approved=True), observed(NEW)]}})
    assert select_revision(entries, None).digest == Revision.of(NEW).aggregate
    assert select_revision(entries, Revision.of(OLD).aggregate[:19]).approved is True
    assert select_revision(entries, Revision.of(NEW).aggregate[7:20]).digest == Revision.of(NEW).aggregate
    with pytest.raises(UnknownRevisionError, match="no observed revision has digest"):
        select_revision(entries, "sha256:0000")
    with pytest.raises(AmbiguousRevisionError, match="fits 2 observed revisions"):
        select_revision(entries, "sha256:")
    with pytest.raises(UnknownRevisionError, match="already approved"):
        select_revision(entries[:1], None)


def test_two_unapproved_revisions_must_be_named():
    third = Interface.from_document({"tools": [{"name": "x", "inputSchema": {"type": "object"}}]})
    entries = observed_revisions({"status": {"observed": [observed(NEW), observed(third)]}})
    with pytest.raises(AmbiguousRevisionError, match="2 observed revisions are not approved"):
        select_revision(entries, None)


def test_definitions_must_digest_to_the_observed_digest():
    assert Revision.of(verified_interface(ObservedRevision.from_status(observed(NEW)))).digest == Revision.of(NEW).digest
    forged = observed(NEW, definitions=OLD.to_document())
    with pytest.raises(DigestMismatchError, match="refusing to approve what was not observed"):
        verified_interface(ObservedRevision.from_status(forged))
    with pytest.raises(NoDefinitionsError):
        verified_interface(ObservedRevision.from_status(observed(NEW, approved=True)))


def test_definitions_are_checked_under_the_resources_ignore_rules():
    document = copy.deepcopy(NEW_DOCUMENT)
    document["tools"][0]["_meta"] = {"generatedAt": "2026-11-22T02:00:00Z"}
    rules = ["/tools/*/_meta/generatedAt"]
    entry = ObservedRevision.from_status(observed(Interface.from_document(document), ignore=rules))
    assert Revision.of(verified_interface(entry, rules)).aggregate == \
        Revision.of(Interface.from_document(document)).aggregate
    with pytest.raises(DigestMismatchError):
        verified_interface(entry, [])


def test_approve_appends_once_and_replace_keeps_only_the_new_one():
    edited = manifest(OLD)
    result = approve(edited, NEW)
    assert result.added and result.removed == ()
    assert [r.aggregate for r in load_pinned(edited).revisions] == [Revision.of(OLD).aggregate,
                                                                    Revision.of(NEW).aggregate]
    again = approve(edited, NEW)
    assert not again.changed and len(edited["spec"]["approved"]) == 2
    replaced = approve(edited, NEW, replace=True)
    assert replaced.removed == (Revision.of(OLD).aggregate,)
    assert [entry["digest"] for entry in edited["spec"]["approved"]] == [Revision.of(NEW).aggregate]


def test_approve_digests_under_the_manifests_own_ignore_rules():
    rules = ["/tools/*/_meta/generatedAt"]
    document = copy.deepcopy(NEW_DOCUMENT)
    document["tools"][0]["_meta"] = {"generatedAt": "2026-11-22T02:00:00Z", "build": "42"}
    edited = manifest(OLD, ignore=rules)
    approve(edited, Interface.from_document(document), with_definitions=False)
    entry = edited["spec"]["approved"][-1]
    assert "definitions" not in entry
    assert entry["digest"] == Revision.of(Interface.from_document(document), rules).aggregate
    assert entry["digest"] != Revision.of(Interface.from_document(document)).aggregate


def test_prune_keeps_what_pods_serve_and_never_empties():
    edited = manifest(OLD, NEW)
    result = prune_unserved(edited, [Revision.of(NEW).aggregate])
    assert result.removed == (Revision.of(OLD).aggregate,)
    with pytest.raises(ApprovalError, match="pruning would approve nothing"):
        prune_unserved(edited, ["sha256:" + "0" * 64])
    assert len(edited["spec"]["approved"]) == 1


def test_only_an_mcpserverinterface_can_be_edited():
    with pytest.raises(NotAManifestError):
        approve({"apiVersion": "v1", "kind": "ConfigMap"}, NEW)
    with pytest.raises(NotAManifestError, match="unsupported apiVersion"):
        approve({**manifest(OLD), "apiVersion": "lockstep.dev/v2"}, NEW)
