"""`lockstep check`'s signed-approval lines (issue 33 item 7), from the objects a cluster would hold."""

from __future__ import annotations

import datetime
from typing import Any

from lockstep_testing.interface_admission import manifest

from lockstep.cli.check_results import Status
from lockstep.cli.check_approvals import approval_results
from lockstep.core.approver_keys import generate_key, signer_of_pem
from lockstep.core.revision import Revision
from lockstep.core.signed_approval import ATTESTATION_FIELD, ApprovalStatement, SignedApproval

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)
ALICE, BOB = generate_key(), generate_key()


def policy(mode: str = "Enforce", threshold: int = 1, bob_until: str | None = None) -> dict[str, Any]:
    bob = {"name": "bob", "publicKey": BOB.public_pem.decode(), **({"notAfter": bob_until} if bob_until else {})}
    return {"kind": "MCPApprovalPolicy", "metadata": {"name": "approvers"},
            "spec": {"threshold": threshold, "keys": [{"name": "alice", "publicKey": ALICE.public_pem.decode()}, bob],
                     "scopes": [{"namespaces": ["agents"], "mode": mode}]}}


def signed() -> dict[str, Any]:
    body = manifest()
    entry = body["spec"]["approved"][0]
    statement = ApprovalStatement.of(Revision.from_spec(entry), "agents", "weather", 1, NOW + datetime.timedelta(days=9))
    entry[ATTESTATION_FIELD] = SignedApproval.create(statement, signer_of_pem(ALICE.private_pem)).to_dict()
    return body


def lines(policies: list[dict[str, Any]], resources: list[dict[str, Any]]) -> list[tuple[Status, str]]:
    return [(result.status, result.message) for result in approval_results(policies, resources, NOW)]


def test_without_a_policy_it_says_approvals_are_not_signed() -> None:
    [(status, message)] = lines([], [manifest()])
    assert status is Status.OK and "approvals are not signed" in message


def test_it_names_the_mode_per_namespace_and_the_resources_that_would_not_verify() -> None:
    found = lines([policy()], [manifest(), signed()])
    assert (Status.OK, "MCPApprovalPolicy approvers: 1 of 2 keys; Enforce in agents") in found
    failed = [message for status, message in found if status is Status.FAIL]
    assert len(failed) == 1 and "not trusted (Unsigned" in failed[0] and "not verified" in failed[0]
    assert (Status.OK, "MCPServerInterface agents/weather: every approved revision is signed as required") in found
    warned = [message for status, message in lines([policy(mode="Warn")], [manifest()]) if status is Status.WARN]
    assert len(warned) == 1 and "would not verify under Enforce" in warned[0]


def test_keys_near_expiry_or_expired_are_reported_and_too_few_keys_fail() -> None:
    soon = [message for status, message in lines([policy(bob_until="2026-12-10T00:00:00Z")], [])
            if status is Status.WARN]
    assert soon == ["MCPApprovalPolicy approvers: key bob expires 2026-12-10"]
    gone = lines([policy(threshold=2, bob_until="2026-11-01T00:00:00Z")], [])
    assert any(status is Status.WARN and "key bob expired 2026-11-01" in message for status, message in gone)
    assert any(status is Status.FAIL and "1 keys valid now, 2 required" in message for status, message in gone)


def test_a_policy_that_does_not_parse_fails_the_check() -> None:
    broken = policy()
    broken["spec"]["threshold"] = 5
    assert any(status is Status.FAIL and "unusable" in message for status, message in lines([broken], []))
