"""What an MCPServerInterface does about drift (``spec.enforcement``) and how a revision gets approved
(``spec.approval``), and which of two is stricter: one order for admission and for judging."""

from __future__ import annotations

import enum

__all__ = ["Approval", "Enforcement", "strictness"]


class Enforcement(str, enum.Enum):
    ISOLATE = "Isolate"
    AUDIT = "Audit"
    QUARANTINE = "Quarantine"


class Approval(str, enum.Enum):
    MANUAL = "Manual"
    FIRST_SEEN = "FirstSeen"


#: Higher is stricter. Quarantine keeps a drifted pod serving the approved subset: laxer than Isolate,
#: which takes it out of its Services, and stricter than Audit, which only reports.
_ENFORCEMENT_ORDER = {Enforcement.AUDIT: 0, Enforcement.QUARANTINE: 1, Enforcement.ISOLATE: 2}
_APPROVAL_ORDER = {Approval.FIRST_SEEN: 0, Approval.MANUAL: 1}


def strictness(enforcement: str, approval: str) -> tuple[int, int]:
    """(enforcement, approval) ranks, higher is stricter on each axis; a value this version does not
    know ranks as the strictest (the API server's schema refuses unknown values anyway)."""
    try:
        enforcement_rank = _ENFORCEMENT_ORDER[Enforcement(enforcement)]
    except ValueError:
        enforcement_rank = max(_ENFORCEMENT_ORDER.values())
    try:
        approval_rank = _APPROVAL_ORDER[Approval(approval)]
    except ValueError:
        approval_rank = max(_APPROVAL_ORDER.values())
    return enforcement_rank, approval_rank
