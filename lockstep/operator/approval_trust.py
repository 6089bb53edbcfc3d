"""Signed approvals in the operator: the MCPApprovalPolicy objects it watches, and which approved revisions of each
MCPServerInterface it trusts.

Whatever admission did (a resource written while the webhook was down, restored from a backup, applied by a
bypass), the operator verifies every ``spec.approved[]`` entry again before it trusts it
(:func:`lockstep.core.trust_policy.decide_trust`): a revision that is not trusted under an ``Enforce`` scope is
taken out of the resource's policy, so no pod verifies against it and no sidecar's proxy receives it; the pods
that serve it get the reason ``ApprovalUntrusted``. Verification runs when a resource or a policy changes and
once a minute (statements and keys expire), never per report.

The sequence floor of each resource (approvals below it are rolled back) is kept per policy in the policy's
``status.floors`` (cluster-scoped, written by the operator only), so that deleting and recreating a resource,
or restoring an old backup of it, cannot bring a revoked approval back.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockstep.core.names import GROUP, POLICY_PLURAL, VERSION
from lockstep.core.trust_policy import BrokenPolicy, TrustDecision, TrustPolicy, decide_trust, parse_policy
from lockstep.operator.judge import Approval, Policy
from lockstep.operator.kube import KubeApiError, KubeClient

__all__ = ["ApprovalTrust", "policy_status_path"]

logger = logging.getLogger(__name__)

Key = tuple[str, str]
FIRST_SEEN_REFUSED = ("approval FirstSeen (trust on first use) is refused under an Enforce MCPApprovalPolicy whose "
                      "scope does not allow it (allowFirstSeen): approve a signed revision")


def policy_status_path(name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/{POLICY_PLURAL}/{name}/status"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class ApprovalTrust:
    """The trust policies, and per resource the policy as judged (its untrusted revisions taken out)."""

    def __init__(self, now: Callable[[], datetime.datetime] = _utcnow) -> None:
        self.now = now
        self.policies: dict[str, TrustPolicy | BrokenPolicy] = {}
        #: Policy name -> "namespace/name" -> the floor recorded in its status (or raised here, not yet written).
        self.floors: dict[str, dict[str, int]] = {}
        self._unwritten: dict[str, dict[str, int]] = {}
        #: The resource's policy as parsed (every approved revision) and its spec.approved entries.
        self._parsed: dict[Key, tuple[Policy, Sequence[Any]]] = {}
        self.decisions: dict[Key, TrustDecision] = {}

    @property
    def active(self) -> bool:
        return bool(self.policies)

    # ------------------------------------------------------------------ policies
    def on_policy(self, event_type: str, body: Mapping[str, Any]) -> bool:
        """Take a watch event of an MCPApprovalPolicy; True when the policies changed."""
        name = str((body.get("metadata") or {}).get("name") or "")
        if event_type == "DELETED":
            self.floors.pop(name, None)
            return self.policies.pop(name, None) is not None
        parsed = parse_policy(body)
        if isinstance(parsed, BrokenPolicy):
            logger.error("%s: it trusts no approval until it is fixed", parsed.error)
        recorded = (body.get("status") or {}).get("floors") or {}
        floors = self.floors.setdefault(name, {})
        for resource, floor in recorded.items():
            if isinstance(floor, int):
                floors[resource] = max(floors.get(resource, 0), floor)
        changed = self.policies.get(name) != parsed
        self.policies[name] = parsed
        return changed

    # ------------------------------------------------------------------ resources
    def decide(self, namespace: str, name: str, entries: Sequence[Any]) -> TrustDecision:
        """The policies' verdict on ``spec.approved[]`` of a resource, as of now (nothing is remembered: the
        admission webhook asks before the resource exists)."""
        resource = f"{namespace}/{name}"
        floors = {policy: floors.get(resource, 0) for policy, floors in self.floors.items()}
        return decide_trust(entries, namespace, name, self.policies.values(), self.now(), floors)

    def judged(self, policy: Policy, entries: Sequence[Any]) -> Policy:
        """``policy`` with the approved revisions it may not trust taken out (and trust on first use where a
        policy refuses it); remembered, so that :meth:`rejudged` can decide again."""
        key = (policy.namespace, policy.name)
        self._parsed[key] = (policy, list(entries))
        return self._narrowed(key)

    def forget(self, key: Key) -> None:
        self._parsed.pop(key, None)
        self.decisions.pop(key, None)

    def rejudged(self) -> dict[Key, Policy]:
        """Every resource whose trusted revisions changed (a policy changed, a statement or a key expired): its
        policy as judged now."""
        changed = {}
        for key in list(self._parsed):
            before = self.decisions.get(key)
            policy = self._narrowed(key)
            if self.decisions.get(key) != before:
                changed[key] = policy
        return changed

    def _narrowed(self, key: Key) -> Policy:
        policy, entries = self._parsed[key]
        if not self.policies:
            self.decisions.pop(key, None)
            return policy
        decision = self.decide(key[0], key[1], entries)
        self.decisions[key] = decision
        self._raise_floors(f"{key[0]}/{key[1]}", decision.floors)
        if not decision.enforced:
            return policy
        trusted = tuple(revision for revision in policy.approved if decision.trusts(revision.aggregate))
        untrusted = {digest: why for digest, why in decision.untrusted.items()
                     if any(revision.aggregate == digest for revision in policy.approved)}
        problems = policy.problems
        approval, first_seen = policy.approval, policy.trusted
        if policy.approval is Approval.FIRST_SEEN and not decision.first_seen_allowed:
            approval, first_seen = Approval.MANUAL, None
            problems += (FIRST_SEEN_REFUSED,)
        return dataclasses.replace(policy, approved=trusted, untrusted=untrusted, approval=approval,
                                   trusted=first_seen, problems=problems)

    def _raise_floors(self, resource: str, floors: Mapping[str, int]) -> None:
        for name, floor in floors.items():
            recorded = self.floors.setdefault(name, {})
            if floor > recorded.get(resource, 0):
                recorded[resource] = floor
                self._unwritten.setdefault(name, {})[resource] = floor

    async def write_floors(self, client: KubeClient) -> None:
        """Record raised floors in the policies' status (a merge patch: other resources' floors stay)."""
        pending, self._unwritten = self._unwritten, {}
        for name, floors in pending.items():
            if name not in self.policies:
                continue
            try:
                await client.merge_patch(policy_status_path(name), {"status": {"floors": floors}})
            except (KubeApiError, OSError) as error:
                logger.warning("Cannot record the approval floors in MCPApprovalPolicy %s: %s", name, error)
                for resource, floor in floors.items():  # again at the next round
                    self._unwritten.setdefault(name, {})[resource] = max(
                        floor, self._unwritten.get(name, {}).get(resource, 0))
