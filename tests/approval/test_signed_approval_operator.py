"""Signed approvals in the operator: the validating webhook (through kopf's admission engine) refuses what an Enforce
MCPApprovalPolicy does not trust, and the operator's own verification takes such a revision out of the policy it
judges pods by, whatever admission did."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import kopf
from lockstep_testing.interfaces import WEATHER
from lockstep_testing.interface_admission import manifest, refusal, sender

from lockstep.core import Interface
from lockstep.core.approver_keys import generate_key, signer_of_pem
from lockstep.core.conditions import Reason
from lockstep.core.report import Observation
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import ATTESTATION_FIELD, ApprovalStatement, SignedApproval
from lockstep.operator.approval_trust import ApprovalTrust
from lockstep.operator.judge import Policy, judge
from lockstep.operator.validation import register_validation

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
ALICE, BOB, EDITOR = generate_key(), generate_key(), generate_key()


def policy_object(threshold: int = 1, mode: str = "Enforce", **scope: Any) -> dict[str, Any]:
    keys = [{"name": name, "publicKey": pair.public_pem.decode()} for name, pair in (("alice", ALICE), ("bob", BOB))]
    return {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPApprovalPolicy", "metadata": {"name": "approvers"},
            "spec": {"keys": keys, "threshold": threshold,
                     "scopes": [{"namespaces": ["agents"], "mode": mode, **scope}]}}


def trust_with(*policies: dict[str, Any], now: datetime.datetime = NOW) -> ApprovalTrust:
    trust = ApprovalTrust(now=lambda: now)
    for body in policies:
        trust.on_policy("ADDED", body)
    return trust


def signed(body: dict[str, Any], *pairs: Any, sequence: int = 1, days: int = 30) -> dict[str, Any]:
    body = copy.deepcopy(body)
    for entry in body["spec"]["approved"]:
        statement = ApprovalStatement.of(Revision.from_spec(entry), body["metadata"]["namespace"],
                                         body["metadata"]["name"], sequence, NOW + datetime.timedelta(days=days))
        approval = SignedApproval.create(statement, signer_of_pem(pairs[0].private_pem))
        for pair in pairs[1:]:
            approval = approval.add_signature(signer_of_pem(pair.private_pem))
        entry[ATTESTATION_FIELD] = approval.to_dict()
    return body


def webhook(trust: ApprovalTrust) -> Any:
    registry = kopf.OperatorRegistry()
    register_validation(registry, None, trust=trust)
    return sender(registry)


async def test_the_webhook_refuses_an_unsigned_revision_under_enforce_naming_it() -> None:
    validate = webhook(trust_with(policy_object()))
    message = refusal(await validate(manifest()))
    assert "spec.approved[0]" in message and "Unsigned" in message and "lockstep sign" in message
    assert (await validate(signed(manifest(), ALICE)))["allowed"] is True


async def test_the_webhook_refuses_an_editors_own_key_and_one_of_two() -> None:
    validate = webhook(trust_with(policy_object(threshold=2)))
    assert "0 of 2 required" in refusal(await validate(signed(manifest(), EDITOR)))
    assert "1 of 2 required" in refusal(await validate(signed(manifest(), ALICE)))
    assert (await validate(signed(manifest(), ALICE, BOB)))["allowed"] is True


async def test_under_warn_the_webhook_admits_and_warns() -> None:
    response = await webhook(trust_with(policy_object(mode="Warn")))(manifest())
    assert response["allowed"] is True and any("Unsigned" in warning for warning in response["warnings"])


async def test_without_a_policy_nothing_changes() -> None:
    assert (await webhook(trust_with())(manifest()))["allowed"] is True


async def test_trust_on_first_use_is_refused_under_enforce_unless_the_scope_allows_it() -> None:
    first_seen = signed(manifest(approval="FirstSeen"), ALICE)
    assert "FirstSeen" in refusal(await webhook(trust_with(policy_object()))(first_seen))
    allowing = webhook(trust_with(policy_object(allowFirstSeen=True)))
    assert (await allowing(first_seen))["allowed"] is True


def observation(document: dict[str, Any] = WEATHER) -> Observation:
    revision = Revision.of(Interface.from_document(document))
    return Observation("2026-11-29T12:00:00Z", digest=revision.digest, definitions=document)


def test_the_operator_does_not_trust_what_admission_let_in() -> None:
    """Written while the webhook was down: the unsigned revision is taken out of what pods are judged against, and
    the pod that serves it is ApprovalUntrusted (not Verified), with why."""
    body = manifest()
    trust = trust_with(policy_object())
    judged = trust.judged(Policy.from_resource(body), body["spec"]["approved"])
    assert judged.approved == () and list(judged.untrusted) == [body["spec"]["approved"][0]["digest"]]
    verdict = judge(observation(), judged)
    assert verdict.status == "False" and verdict.reason is Reason.APPROVAL_UNTRUSTED and "Unsigned" in verdict.message
    good = signed(body, ALICE)
    assert judge(observation(), trust.judged(Policy.from_resource(good), good["spec"]["approved"])).status == "True"


def test_an_expiring_statement_is_rejudged_without_any_change_to_the_resource() -> None:
    clock = [NOW]
    trust = ApprovalTrust(now=lambda: clock[0])
    trust.on_policy("ADDED", policy_object())
    body = signed(manifest(), ALICE, days=1)
    assert trust.judged(Policy.from_resource(body), body["spec"]["approved"]).approved
    assert trust.rejudged() == {}
    clock[0] = NOW + datetime.timedelta(days=2)
    [(key, policy)] = trust.rejudged().items()
    assert key == ("agents", "weather") and policy.approved == ()
    assert "Expired" in next(iter(policy.untrusted.values()))


def test_a_rolled_back_approval_stays_refused_after_the_resource_is_recreated() -> None:
    """The floor raised by sequence 2 is kept by the policy (its status): the sequence-1 manifest of an old backup,
    applied after a delete, is refused."""
    trust = trust_with(policy_object())
    newer = signed(manifest(), ALICE, sequence=2)
    trust.judged(Policy.from_resource(newer), newer["spec"]["approved"])
    assert trust.floors == {"approvers": {"agents/weather": 2}}
    status = {"floors": trust.floors["approvers"]}
    trust.forget(("agents", "weather"))
    restarted = trust_with({**policy_object(), "status": status})  # another replica, or after a restart
    older = signed(manifest(), ALICE, sequence=1)
    judged = restarted.judged(Policy.from_resource(older), older["spec"]["approved"])
    assert judged.approved == () and "RolledBack" in next(iter(judged.untrusted.values()))


def test_a_policy_that_does_not_parse_trusts_nothing() -> None:
    broken = policy_object()
    broken["spec"]["keys"][0]["publicKey"] = "garbage"
    body = signed(manifest(), ALICE)
    judged = trust_with(broken).judged(Policy.from_resource(body), body["spec"]["approved"])
    assert judged.approved == () and "PolicyInvalid" in next(iter(judged.untrusted.values()))

