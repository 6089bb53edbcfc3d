"""Start and restart: everything the reconciler needs survives a restart in the cluster itself. At start
(and when a replica takes a resource over) the last verdicts are rebuilt from the pods' conditions and the
resources' status, so that nothing flips. Pure: the reconciler lists, these functions read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from lockstep.operator.cache import PodRecord, ResourceRecord
from lockstep.operator.judge import Reason, Verdict, state_of
from lockstep.operator.state import PodTrack, ResourceMemory
from lockstep.operator.status import now_iso

from lockstep.core import Interface
from lockstep.core.digest import ComponentDigest, InterfaceDigest
from lockstep.core.errors import LockstepError
from lockstep.core.report import FailureReason, Observation
from lockstep.core.revision import Revision

__all__ = ["memory_from_status", "restore_track", "small_enough"]

_FAILURE_REASONS = {Reason.SERVER_UNREACHABLE: FailureReason.SERVER_UNREACHABLE,
                    Reason.INTERFACE_INVALID: FailureReason.INTERFACE_INVALID}


def restore_track(pod: PodRecord, resources: list[ResourceRecord]) -> PodTrack | None:
    """The pod's last verdict as the cluster keeps it (its condition, its resource's status), or None when
    there is nothing to restore: no Lockstep condition, a reason Lockstep does not write, or not exactly
    one resource selecting the pod."""
    condition = pod.lockstep_condition
    if condition is None or len(resources) != 1:
        return None
    try:
        reason = Reason(condition.get("reason"))
    except ValueError:
        return None
    status = resources[0].status
    entry = next((item for item in status.get("observed") or [] if pod.name in (item.get("pods") or [])), None)
    observation, revision = _rebuild_observation(reason, condition, entry)
    verdict = Verdict(str(condition.get("status")), reason, str(condition.get("message") or ""), state_of(reason),
                      revision, (entry or {}).get("closestApproved") or (revision.aggregate if revision else None),
                      tuple((entry or {}).get("findings") or ()))
    return PodTrack(
        uid=pod.uid, observation=observation, received_at=time.monotonic(), verdict=verdict,
        was_verified=reason in (Reason.VERIFIED, Reason.INTERFACE_CHANGED),
        # A True is never restored as stale: check_stale would skip it; it must be renewed by a report
        # within staleAfter, or it is written False (a ReportStale True someone else wrote never stands).
        stale=reason is Reason.REPORT_STALE and verdict.status != "True", written=verdict.condition,
        proxied=reason is Reason.QUARANTINED)


def _rebuild_observation(reason: Reason, condition: Mapping[str, Any], entry: Mapping[str, Any] | None
                         ) -> tuple[Observation | None, Revision | None]:
    """The last observation, as far as the pod's condition and the resource's status tell it."""
    observed_at = str(condition.get("lastTransitionTime") or now_iso())
    if reason in _FAILURE_REASONS:
        return Observation.of_failure(_FAILURE_REASONS[reason], str(condition.get("message") or ""),
                                      observed_at), None
    if entry is None:
        return None, None
    try:
        digest = InterfaceDigest.from_components(
            (ComponentDigest.from_dict(item) for item in entry.get("components") or []),
            str(entry.get("formula") or ""))
    except LockstepError:
        return None, None
    if digest.digest != entry.get("digest"):
        return None, None
    definitions = entry.get("definitions")
    if isinstance(definitions, Mapping):
        # Judging digests the definitions again under the ignore rules of the moment.
        try:
            return Observation(observed_at, digest, dict(definitions)), \
                Revision(digest, Interface.from_document(definitions))
        except LockstepError:
            pass
    # Components only: they are digested under the resource's ignore rules already, and judging
    # compares them as they are.
    return Observation(observed_at, digest, None), Revision(digest)


def memory_from_status(status: Mapping[str, Any]) -> ResourceMemory:
    """What the operator remembers of a resource, as its status tells it."""
    memory = ResourceMemory()
    for entry in status.get("observed") or []:
        if entry.get("digest") and entry.get("firstSeen"):
            memory.first_seen[str(entry["digest"])] = str(entry["firstSeen"])
    if isinstance(status.get("trusted"), Mapping):
        memory.trusted = dict(status["trusted"])
    if status.get("lastVerificationTime"):
        memory.last_verification = str(status["lastVerificationTime"])
    return memory


def small_enough(revision: Revision, limit: int) -> bool:
    """Whether the revision's definitions fit in status (``limit`` characters of compact JSON)."""
    return revision.interface is not None and \
        len(json.dumps(revision.interface.to_document(), separators=(",", ":"))) <= limit
