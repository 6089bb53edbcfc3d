"""The pod condition Lockstep owns: its type and reasons, for the operator that writes it and the CLI that
reads it."""

from __future__ import annotations

import enum

from lockstep.core.names import CONDITION_TYPE

__all__ = ["CONDITION_TYPE", "DRIFT_REASONS", "Reason"]


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


#: Reasons of a pod held out because it serves an interface that is not approved.
DRIFT_REASONS = frozenset({Reason.INTERFACE_CHANGED.value, Reason.NOT_APPROVED.value})
