"""The MCPServerInterface status: built from the pods' verdicts, written only when it changes.

Shape (documented for users and for ``lockstep diff``/``approve`` in docs/operator.md)::

    status:
      observedGeneration: 3
      phase: Verified | Drifted | Pending | Degraded
      podsReady: "2/3"
      approvedDigest: sha256:0123456789ab
      lastVerificationTime: 2026-11-22T02:00:00Z
      pods: {total, ready, verified, drifted, pending, stale, unreachable, invalid, conflict, audit}
      trusted: {digest, formula, components, definitions?, trustedAt, pod}      # approval FirstSeen
      observed:
        - {digest, formula, approved, pods: [...], podCount, firstSeen, closestApproved,
           findings: [{kind, name, change, fields, severity, reasons}], components: [...],
           definitions: {...}}       # definitions only when not approved and small enough
           # (else definitionsRef/definitionsOmitted, added by lockstep.operator.observed_maps)
      conditions: [Ready, Reconciling, Stalled]   # Flux/Argo CD style, with observedGeneration
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lockstep.operator.cache import PodRecord
from lockstep.operator.judge import PodState, Policy, Verdict, short_digest
from lockstep.operator.state import PodTrack, ResourceMemory

from lockstep.core.conditions import condition_dict
from lockstep.core.spec import PROXIED_ENFORCEMENTS
from lockstep.core.revision import Revision

__all__ = ["build_status", "finding_counts", "now_iso"]

OBSERVED_LIMIT = 20
PODS_LISTED = 100
#: Definitions kept in status, in all, as a multiple of the per-revision limit.
DEFINITIONS_BUDGET = 4
READY_STATES = (PodState.VERIFIED, PodState.AUDIT, PodState.QUARANTINED)
#: Withheld components listed in status.proxy.withheld (newest first).
WITHHELD_LISTED = 20


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_status(policy: Policy, pods: Sequence[tuple[PodRecord, PodTrack | None]], memory: ResourceMemory,
                 previous: Mapping[str, Any], *, definitions_limit: int) -> dict[str, Any]:
    counts = Counter(_state(track) for _, track in pods)
    ready = sum(counts[state] for state in READY_STATES)
    phase = _phase(policy, counts, len(pods))
    status: dict[str, Any] = {
        "observedGeneration": policy.generation,
        "phase": phase,
        "podsReady": f"{ready}/{len(pods)}",
        "approvedDigest": _approved_digest(policy, memory),
        "pods": {"total": len(pods), "ready": ready, **{state.value: counts[state] for state in PodState}},
        "observed": _observed(pods, memory, definitions_limit),
        "conditions": _conditions(policy, phase, counts, len(pods), previous, memory.bypassing),
    }
    if policy.enforcement in PROXIED_ENFORCEMENTS or memory.withheld:
        status["proxy"] = {"withheld": memory.withheld[:WITHHELD_LISTED], "bypassingServices": memory.bypassing}
    if memory.last_verification:
        status["lastVerificationTime"] = memory.last_verification
    if memory.trusted:
        status["trusted"] = memory.trusted
    return status


def finding_counts(status: Mapping[str, Any]) -> dict[tuple[str, str, str], int]:
    """Drift findings by (component kind, change, severity) over the observed revisions."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for entry in status.get("observed") or []:
        for finding in entry.get("findings") or []:
            counts[(str(finding.get("kind")), str(finding.get("change")), str(finding.get("severity")))] += 1
    return dict(counts)


def _state(track: PodTrack | None) -> PodState:
    return track.verdict.state if track and track.verdict else PodState.PENDING


def _phase(policy: Policy, counts: Counter[PodState], total: int) -> str:
    if counts[PodState.DRIFTED] or counts[PodState.AUDIT] or counts[PodState.QUARANTINED]:
        return "Drifted"
    if policy.problems or any(counts[state] for state in (PodState.STALE, PodState.UNREACHABLE,
                                                          PodState.INVALID, PodState.CONFLICT)):
        return "Degraded"
    if total == 0 or counts[PodState.PENDING]:
        return "Pending"
    return "Verified"


def _approved_digest(policy: Policy, memory: ResourceMemory) -> str:
    if policy.approved:
        return short_digest(policy.approved[-1].aggregate)
    if memory.trusted:
        return short_digest(str(memory.trusted.get("digest", "")))
    return ""


def _observed(pods: Sequence[tuple[PodRecord, PodTrack | None]], memory: ResourceMemory,
              definitions_limit: int) -> list[dict[str, Any]]:
    groups: dict[str, list[tuple[PodRecord, Verdict]]] = {}
    for pod, track in pods:
        if track and track.verdict and track.verdict.revision is not None:
            groups.setdefault(track.verdict.revision.aggregate, []).append((pod, track.verdict))
    entries = []
    budget = definitions_limit * DEFINITIONS_BUDGET  # keeps the whole status far below etcd's 1.5 MiB
    for digest, members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))[:OBSERVED_LIMIT]:
        verdict = members[0][1]
        assert verdict.revision is not None
        approved = verdict.closest == digest
        entry: dict[str, Any] = {
            "digest": digest,
            "formula": verdict.revision.digest.formula,
            "approved": approved,
            "pods": sorted(pod.name for pod, _ in members)[:PODS_LISTED],
            "podCount": len(members),
            "firstSeen": memory.first_seen.setdefault(digest, now_iso()),
            "components": [component.to_dict() for component in verdict.revision.digest.components],
        }
        if not approved:
            entry["closestApproved"] = verdict.closest
            entry["findings"] = list(verdict.findings)
            size = _definitions_size(verdict.revision, memory)
            if verdict.revision.interface is not None and size <= min(definitions_limit, budget):
                entry["definitions"] = verdict.revision.interface.to_document()
                budget -= size
        entries.append(entry)
    return entries


def _definitions_size(revision: Revision, memory: ResourceMemory) -> int:
    """Bytes of the revision's definitions as JSON (remembered per digest: status is built often)."""
    size = memory.definitions_size.get(revision.aggregate)
    if size is None:
        document = revision.interface.to_document() if revision.interface is not None else None
        size = len(json.dumps(document, separators=(",", ":"))) if document is not None else 1 << 62
        memory.definitions_size[revision.aggregate] = size
    return size


def _conditions(policy: Policy, phase: str, counts: Counter[PodState], total: int,
                previous: Mapping[str, Any], bypassing: Sequence[str] = ()) -> list[dict[str, Any]]:
    ready = sum(counts[state] for state in READY_STATES)
    pending = counts[PodState.PENDING]
    wanted = [
        ("Ready", "True" if phase == "Verified" else "False",
         "Verified" if phase == "Verified" else phase, f"{ready}/{total} pods verified"),
        ("Reconciling", "True" if pending else "False", "AwaitingReports" if pending else "Reconciled",
         f"{pending} pods have not reported yet" if pending else "every selected pod has reported"),
        ("Stalled", "True" if policy.problems else "False", "InvalidSpec" if policy.problems else "SpecValid",
         "; ".join(policy.problems)[:1024] if policy.problems else "the spec is usable"),
    ]
    if policy.enforcement in PROXIED_ENFORCEMENTS:
        wanted.append(("ProxyBypassed", "True" if bypassing else "False",
                       "ServiceBypassesProxy" if bypassing else "AllServicesProxied",
                       (f"Services that send traffic past the proxy (target the MCP port, not lockstep-mcp): "
                        f"{', '.join(bypassing)}")[:1024] if bypassing
                       else "every Service that selects the pods targets the proxy port"))
    before = {condition.get("type"): condition for condition in previous.get("conditions") or []}
    conditions = []
    now = now_iso()
    for type_, value, reason, message in wanted:
        conditions.append(condition_dict(type_, value, reason, message, before.get(type_), now,
                                         observedGeneration=policy.generation))
    return conditions
