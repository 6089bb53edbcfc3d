"""The pod condition Lockstep owns: its type and reasons, the pod state each reason counts as, and the one
rule for a condition's lastTransitionTime; for the operator that writes conditions (a pod's, a resource's)
and the CLI that reads them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from lockstep.core.names import CONDITION_TYPE

__all__ = ["CONDITION_TYPE", "DRIFT_REASONS", "STATE_OF_REASON", "PodState", "Reason", "condition_dict",
           "state_of", "transition_time"]


class Reason(str, enum.Enum):
    """The reason of the pod condition ``lockstep.dev/interface-verified``."""

    VERIFIED = "Verified"
    AUDIT = "Audit"
    #: Enforcement Quarantine: the proxy withholds the drifted components; the pod serves the rest.
    QUARANTINED = "Quarantined"
    INTERFACE_CHANGED = "InterfaceChanged"
    INTERFACE_INVALID = "InterfaceInvalid"
    NOT_APPROVED = "NotApproved"
    REPORT_STALE = "ReportStale"
    SERVER_UNREACHABLE = "ServerUnreachable"
    CONFLICT = "Conflict"
    #: Isolate and Quarantine: the MCP server answers on the pod's IP, past the in-line proxy.
    SERVER_EXPOSED = "ServerExposed"
    #: The pod's spec lets a container reach the sidecar's token (admitted while the webhook was off, or never
    #: through it): it is never verified, whatever it reports.
    POD_OUTSIDE_POLICY = "PodOutsidePolicy"
    #: The pod serves a revision that spec.approved lists but that no signed approval vouches for under an Enforce
    #: MCPApprovalPolicy (unsigned, altered, expired, rolled back, too few signatures).
    APPROVAL_UNTRUSTED = "ApprovalUntrusted"
    #: Isolate and Quarantine: the pod's sidecar runs no in-line proxy (it was admitted while no proxied interface
    #: selected it): agents would reach the MCP server with nothing in between. Re-create the pod.
    PROXY_MISSING = "ProxyMissing"
    #: Isolate and Quarantine: the pod's sidecar was admitted for another interface, endpoint port, proxy port or
    #: proxy mode than the interface that selects it now. Re-create the pod.
    BINDING_MISMATCH = "BindingMismatch"


#: Reasons of a pod that serves an interface that is not approved (held out, or in Quarantine served through
#: the proxy, which withholds what is not approved). Members are str: ``"NotApproved" in DRIFT_REASONS``.
DRIFT_REASONS = frozenset({Reason.INTERFACE_CHANGED, Reason.NOT_APPROVED, Reason.APPROVAL_UNTRUSTED})


class PodState(str, enum.Enum):
    """A pod's state as counted in status and in the ``lockstep_pods`` metric."""

    VERIFIED = "verified"
    DRIFTED = "drifted"
    PENDING = "pending"
    STALE = "stale"
    UNREACHABLE = "unreachable"
    INVALID = "invalid"
    CONFLICT = "conflict"
    AUDIT = "audit"
    QUARANTINED = "quarantined"


#: The state every reason counts as (complete: tests/unit/test_conditions.py walks every Reason).
STATE_OF_REASON: Mapping[Reason, PodState] = {
    Reason.VERIFIED: PodState.VERIFIED,
    Reason.INTERFACE_CHANGED: PodState.DRIFTED,
    Reason.NOT_APPROVED: PodState.DRIFTED,
    Reason.APPROVAL_UNTRUSTED: PodState.DRIFTED,
    Reason.INTERFACE_INVALID: PodState.INVALID,
    Reason.SERVER_UNREACHABLE: PodState.UNREACHABLE,
    Reason.REPORT_STALE: PodState.STALE,
    Reason.CONFLICT: PodState.CONFLICT,
    Reason.AUDIT: PodState.AUDIT,
    Reason.QUARANTINED: PodState.QUARANTINED,
    Reason.SERVER_EXPOSED: PodState.INVALID,  # a deployment that lets agents past the proxy
    Reason.POD_OUTSIDE_POLICY: PodState.INVALID,  # a pod spec that could hand the sidecar's token to another container
    Reason.PROXY_MISSING: PodState.INVALID,  # a proxied enforcement with nothing in line
    Reason.BINDING_MISMATCH: PodState.INVALID,  # a sidecar planned for another interface than the one selecting it
}


def state_of(reason: Reason) -> PodState:
    """The pod state a verdict reason counts as in status."""
    return STATE_OF_REASON[reason]


def transition_time(previous: Mapping[str, Any] | None, status: str, now: str) -> str:
    """A condition's lastTransitionTime: kept while its status stays the same, ``now`` when it changes."""
    if previous and previous.get("status") == status and previous.get("lastTransitionTime"):
        return str(previous["lastTransitionTime"])
    return now


def condition_dict(type_: str, status: str, reason: str, message: str, previous: Mapping[str, Any] | None,
                   now: str, **extra: Any) -> dict[str, Any]:
    """A Kubernetes condition (a pod's, a resource's) with transition_time's rule."""
    return {"type": type_, "status": status, "reason": reason, "message": message, **extra,
            "lastTransitionTime": transition_time(previous, status, now)}
