"""``lockstep check``: the signed-approval policies (issue 33 item 7). Where each MCPApprovalPolicy enforces, its
approver keys that expire soon or already did, and every MCPServerInterface whose approved revisions would not be
trusted under ``Enforce`` (failed where a policy enforces: its pods are not verified; a warning where it only warns).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from lockstep.cli.check_results import CheckResult, Context, Status
from lockstep.core.names import GROUP, PLURAL, POLICY_KIND, POLICY_PLURAL, VERSION
from lockstep.core.trust_policy import (
    BrokenPolicy,
    TrustPolicy,
    decide_trust,
    parse_policy,
)

__all__ = ["KEY_WARN_DAYS", "approval_results", "check_approvals"]


NAME = "approvals"
#: An approver key that stops counting within this many days is reported (rotate it: docs/gitops.md).
KEY_WARN_DAYS = 30
HINT = "docs/gitops.md, \"Two approvers: signed approvals\""


def check_approvals(context: Context) -> Iterator[CheckResult]:
    objects = context.kubernetes.client.CustomObjectsApi(context.api)
    try:
        policies = objects.list_cluster_custom_object(GROUP, VERSION, POLICY_PLURAL).get("items") or []
    except context.kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
        policies = []  # the CRD is not installed: there is no policy
    resources = (objects.list_cluster_custom_object(GROUP, VERSION, PLURAL).get("items") or []) if policies else []
    yield from approval_results(policies, resources, datetime.datetime.now(datetime.UTC))


def approval_results(policies: Sequence[Mapping[str, Any]], resources: Sequence[Mapping[str, Any]],
                     now: datetime.datetime) -> Iterator[CheckResult]:
    """The check's lines, from the objects (pure)."""
    if not policies:
        yield CheckResult(NAME, Status.OK, f"no {POLICY_KIND}: approvals are not signed; whoever can write an "
                                           "MCPServerInterface approves", HINT)
        return
    parsed: list[TrustPolicy | BrokenPolicy] = []
    for body in policies:
        policy = parse_policy(body)
        parsed.append(policy)
        if isinstance(policy, BrokenPolicy):
            yield CheckResult(NAME, Status.FAIL, f"{POLICY_KIND} {policy.name} is unusable, so nothing it covers is "
                                                 f"trusted: {policy.error}", "fix the policy (kubectl edit)")
            continue
        yield CheckResult(NAME, Status.OK, f"{POLICY_KIND} {policy.name}: {policy.threshold} of {len(policy.keys)} keys; "
                                           + "; ".join(_scope_text(scope) for scope in policy.scopes))
        yield from _keys(policy, now)
    for resource in resources:
        yield from _resource(resource, parsed, now)


def _scope_text(scope: Any) -> str:
    where = ", ".join(scope.namespaces) or "every namespace"
    if scope.resources:
        where += f" (resources {', '.join(scope.resources)})"
    return f"{scope.mode.value} in {where}" + (", trust on first use allowed" if scope.allow_first_seen else "")


def _keys(policy: TrustPolicy, now: datetime.datetime) -> Iterator[CheckResult]:
    soon = now + datetime.timedelta(days=KEY_WARN_DAYS)
    valid = [key for key in policy.keys if key.valid_at(now)]
    for key in policy.keys:
        if key.not_after is not None and key.not_after <= now:
            yield CheckResult(NAME, Status.WARN, f"{POLICY_KIND} {policy.name}: key {key.name} expired "
                                                 f"{key.not_after:%Y-%m-%d}; its signatures no longer count",
                              "remove it once every revision is signed by current keys")
        elif key.not_after is not None and key.not_after <= soon:
            yield CheckResult(NAME, Status.WARN, f"{POLICY_KIND} {policy.name}: key {key.name} expires "
                                                 f"{key.not_after:%Y-%m-%d}",
                              "add its successor and re-sign the approved revisions before then (lockstep sign)")
    if len(valid) < policy.threshold:
        yield CheckResult(NAME, Status.FAIL, f"{POLICY_KIND} {policy.name}: {len(valid)} keys valid now, "
                                             f"{policy.threshold} required: nothing it enforces can be approved",
                          "add keys or lower the threshold")


def _resource(resource: Mapping[str, Any], policies: Sequence[TrustPolicy | BrokenPolicy],
              now: datetime.datetime) -> Iterator[CheckResult]:
    metadata = resource.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    entries = (resource.get("spec") or {}).get("approved") or []
    decision = decide_trust(entries, namespace, name, policies, now)
    if decision.enforced and decision.untrusted:
        for digest, why in decision.untrusted.items():
            yield CheckResult(NAME, Status.FAIL, f"MCPServerInterface {namespace}/{name}: revision {digest[:19]}… is "
                                                 f"not trusted ({why}); pods serving it are not verified",
                              f"lockstep sign the manifest and apply it ({HINT})")
    for warning in decision.warnings:
        yield CheckResult(NAME, Status.WARN, f"MCPServerInterface {namespace}/{name} would not verify under "
                                             f"Enforce: {warning}", f"lockstep sign the manifest ({HINT})")
    if decision.enforced and not decision.untrusted and entries:
        yield CheckResult(NAME, Status.OK, f"MCPServerInterface {namespace}/{name}: every approved revision is "
                                           "signed as required")
    if (resource.get("spec") or {}).get("approval") == "FirstSeen" and not decision.first_seen_allowed:
        yield CheckResult(NAME, Status.FAIL, f"MCPServerInterface {namespace}/{name}: approval FirstSeen is refused "
                                             "where signed approvals are enforced", "approve a signed revision")
