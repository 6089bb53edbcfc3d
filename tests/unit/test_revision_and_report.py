"""Revisions in CRs and reports from sidecars: digests must agree with definitions."""

import copy

import pytest

from lockstep.core import Interface, MalformedInterfaceError
from lockstep.core.manifest import build_manifest, load_pinned
from lockstep.core.report import FailureReason, Observation, ReportError
from lockstep.core.revision import Revision, RevisionMismatchError

DOCUMENT = {"instructions": "i", "tools": [{"name": "a", "description": "d"}, {"name": "b"}]}


@pytest.fixture
def revision():
    return Revision.of(Interface.from_document(DOCUMENT))


def test_a_revision_survives_the_round_trip_through_a_spec(revision):
    assert Revision.from_spec(revision.to_spec()) == revision
    digests_only = Revision.from_spec(revision.to_spec(with_definitions=False))
    assert digests_only.digest == revision.digest and digests_only.interface is None


def test_definitions_that_do_not_match_the_digest_are_refused(revision):
    entry = revision.to_spec()
    entry["definitions"]["tools"][0]["description"] = "changed after approval"
    with pytest.raises(RevisionMismatchError, match="definitions digest to"):
        Revision.from_spec(entry)


def test_components_that_do_not_match_the_aggregate_are_refused(revision):
    entry = revision.to_spec(with_definitions=False)
    entry["components"][1]["digest"] = "sha256:" + "0" * 64
    with pytest.raises(RevisionMismatchError, match="components digest to"):
        Revision.from_spec(entry)


def test_unknown_formula_is_refused(revision):
    entry = {**revision.to_spec(), "formula": "lockstep/v9"}
    with pytest.raises(MalformedInterfaceError, match="unknown digest formula 'lockstep/v9'"):
        Revision.from_spec(entry)


def test_ignore_rules_apply_to_approved_definitions():
    document = {"tools": [{"name": "a", "_meta": {"ts": 1}}]}
    revision = Revision.of(Interface.from_document(document), ["/tools/*/_meta/ts"])
    assert Revision.from_spec(revision.to_spec(), ["/tools/*/_meta/ts"]) == revision
    with pytest.raises(RevisionMismatchError):
        Revision.from_spec(revision.to_spec())


def test_manifest_round_trip(revision):
    manifest = build_manifest(revision, name="weather", namespace="agents")
    assert manifest["spec"]["selector"] == {"matchLabels": {"app": "weather"}}
    pinned = load_pinned(manifest)
    assert pinned.source == "manifest" and pinned.revisions == (revision,)


def test_a_snapshot_pins_one_revision(revision):
    assert load_pinned(DOCUMENT).revisions == (revision,)


def test_manifest_of_another_kind_is_refused():
    with pytest.raises(MalformedInterfaceError, match="not an MCPServerInterface manifest .*kind 'ConfigMap'"):
        load_pinned({"apiVersion": "v1", "kind": "ConfigMap"})


def test_report_round_trip(revision):
    observation = Observation.of_interface(Interface.from_document(DOCUMENT), "2026-11-22T00:00:00Z")
    assert Observation.from_dict(observation.to_dict()) == observation
    assert observation.digest == revision.digest


def test_a_report_carries_the_interface_it_was_checked_with(revision):
    """Read once: the judge takes the Interface that Observation.from_dict parsed and digested."""
    report = Observation.of_interface(revision.interface, "2026-11-22T00:00:00Z").to_dict()
    observation = Observation.from_dict(report)
    assert observation.interface == revision.interface and observation.digest == revision.digest
    assert Observation.from_dict(observation.to_dict(with_definitions=False)).interface is None


def test_failure_report_round_trip():
    failure = Observation.of_failure(FailureReason.SERVER_UNREACHABLE, "connection refused", "2026-11-22T00:00:00Z")
    parsed = Observation.from_dict(failure.to_dict())
    assert parsed.failed and parsed.failure_reason is FailureReason.SERVER_UNREACHABLE


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda body: body["definitions"]["tools"][0].update(description="evil"), "do not match"),
        (lambda body: body.update(digest="sha256:" + "1" * 64), "aggregate digest does not match"),
        (lambda body: body.update(formula="md5"), "bad digests"),
        (lambda body: body.pop("observedAt"), "observedAt"),
        (lambda body: body.update(failure={"reason": "Fine"}), "unknown failure"),
        (lambda body: body["definitions"]["tools"].append({"name": "a"}), "not a valid interface"),
    ],
)
def test_forged_or_broken_reports_are_refused(mutate, message):
    body = copy.deepcopy(Observation.of_interface(Interface.from_document(DOCUMENT), "t").to_dict())
    mutate(body)
    with pytest.raises(ReportError, match=message):
        Observation.from_dict(body)


def _digests_only() -> dict:
    return copy.deepcopy(Observation.of_interface(Interface.from_document(DOCUMENT), "t").to_dict(with_definitions=False))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda components: components[0].update(digest="sha256:" + "2" * 64),
        lambda components: components[1].update(name="c"),
        lambda components: components[1].update(kind="prompt"),
        lambda components: components.pop(),
        lambda components: components.append(dict(components[0])),
    ],
)
def test_a_digest_only_report_reuses_the_digests_of_the_same_components_only(mutate):
    """Digests rebuilt once per component list (lockstep.core.report._ClaimedDigests): a report that claims a
    known aggregate with other components is judged as if none were kept."""
    from lockstep.core.digest import ComponentDigest, InterfaceDigest

    first, second = Observation.from_dict(_digests_only()), Observation.from_dict(_digests_only())
    assert second.digest is first.digest
    body = _digests_only()
    mutate(body["components"])
    rebuilt = InterfaceDigest.from_components([ComponentDigest.from_dict(entry) for entry in body["components"]])
    if rebuilt.digest != body["digest"]:
        with pytest.raises(ReportError, match="aggregate digest does not match"):
            Observation.from_dict(body)
    else:  # a name or kind the aggregate does not cover (it digests the component digests only)
        assert Observation.from_dict(body).digest == rebuilt != first.digest
    assert Observation.from_dict(_digests_only()).digest == first.digest
    reordered = _digests_only()
    reordered["components"].reverse()  # another order: digested again, the same digests
    assert Observation.from_dict(reordered).digest == first.digest


def test_the_claimed_digests_kept_are_bounded():
    from lockstep.core.report import _ClaimedDigests

    kept = _ClaimedDigests(size=2, components=30)
    digests = [Observation.of_interface(Interface.from_document({"tools": [{"name": f"t{i}"}]}), "t").digest
               for i in range(3)]
    for digest in digests:
        kept.put(digest)
    entries = [[entry.to_dict() for entry in digest.components] for digest in digests]
    assert kept.get("lockstep/v1", digests[0].digest, entries[0]) is None  # the oldest went first
    assert kept.get("lockstep/v1", digests[2].digest, entries[2]) is digests[2]
    assert kept.get("md5", digests[2].digest, entries[2]) is None
    big = Observation.of_interface(Interface.from_document({"tools": [{"name": f"t{i}"} for i in range(4)]}), "t")
    kept.put(big.digest)  # more than a tenth of the components limit: not kept
    assert kept.get("lockstep/v1", big.digest.digest, [entry.to_dict() for entry in big.digest.components]) is None


def test_restamped_keeps_every_other_field():
    import dataclasses

    observation = Observation.of_interface(Interface.from_document(DOCUMENT), "t", view="v")
    again = observation.restamped("later", "w")
    assert again == dataclasses.replace(observation, observed_at="later", view="w")
    assert all(getattr(again, field.name) is getattr(observation, field.name)
               for field in dataclasses.fields(Observation) if field.name not in ("observed_at", "view"))
