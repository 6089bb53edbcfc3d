"""Start and restart: everything the reconciler needs survives a restart in the cluster itself. At start
it lists the resources and pods once and rebuilds the last verdicts from the pods' conditions and the
resources' status, so that nothing flips.

A mixin of :class:`lockstep.operator.reconciler.Reconciler`, whose ``__init__`` sets the state below.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lockstep.operator.cache import PodRecord
from lockstep.operator.judge import PodState, Reason, Verdict, state_of, trusted_revision
from lockstep.operator.status import PodTrack, ResourceMemory, now_iso

from lockstep.core import Interface
from lockstep.core.digest import ComponentDigest, InterfaceDigest
from lockstep.core.errors import LockstepError
from lockstep.core.report import FailureReason, Observation
from lockstep.core.revision import Revision

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache, ResourceRecord
    from lockstep.operator.config import OperatorConfig
    from lockstep.operator.kube import KubeClient
    from lockstep.operator.observed_maps import ObservedMaps

__all__ = ["Restore", "memory_from_status", "small_enough", "trusted_revision"]

logger = logging.getLogger(__name__)
Key = tuple[str, str]
_FAILURE_REASONS = {Reason.SERVER_UNREACHABLE: FailureReason.SERVER_UNREACHABLE,
                    Reason.INTERFACE_INVALID: FailureReason.INTERFACE_INVALID}


class Restore:
    config: OperatorConfig
    client: KubeClient
    cache: ClusterCache
    observed_maps: ObservedMaps
    tracks: dict[Key, PodTrack]
    synced: asyncio.Event
    _dirty: set[Key]
    _owned: set[Key]

    if TYPE_CHECKING:  # in lockstep.operator.reconciler
        def _put_resource(self, body: Mapping[str, Any]) -> tuple[ResourceRecord | None, ResourceRecord]: ...
        def owns_pod(self, pod: PodRecord) -> bool: ...
        def owns_resource(self, key: Key) -> bool: ...

    async def resync(self) -> None:
        """List the resources and pods once, and rebuild the last verdicts from the cluster."""
        namespaces: Iterable[str | None] = self.config.namespaces or [None]
        for namespace in namespaces:
            for body in await self.client.list_all(self.client.resources_path(namespace),
                                                   label_selector=self.config.watch_label_selector or None):
                self._put_resource(body)
            for body in await self.client.list_all(self.client.pods_path(namespace),
                                                   label_selector=self.config.watch_pod_selector or None):
                self.cache.put_pod(PodRecord.from_body(body))
        await self.observed_maps.resync(self.config.namespaces or [None])
        for pod in self.cache.pods():
            self._restore_track(pod)
        self._owned = {record.key for record in self.cache.resources() if self.owns_resource(record.key)}
        self._dirty.update(self._owned)
        self.synced.set()
        logger.info("Synced %d resources and %d pods; restored %d verdicts.",
                    sum(1 for _ in self.cache.resources()), sum(1 for _ in self.cache.pods()), len(self.tracks))

    def _restore_track(self, pod: PodRecord) -> None:
        condition = pod.lockstep_condition
        resources = self.cache.selecting(pod)
        if condition is None or pod.key in self.tracks or len(resources) != 1 or not self.owns_pod(pod):
            return
        try:
            reason = Reason(condition.get("reason"))
        except ValueError:
            return
        status = resources[0].status
        entry = next((item for item in status.get("observed") or [] if pod.name in (item.get("pods") or [])), None)
        observation, revision = _rebuild_observation(reason, condition, entry)
        state = {Reason.AUDIT: PodState.AUDIT, Reason.QUARANTINED: PodState.QUARANTINED}.get(reason) \
            or state_of(reason)
        verdict = Verdict(str(condition.get("status")), reason, str(condition.get("message") or ""), state,
                          revision, (entry or {}).get("closestApproved") or (revision.aggregate if revision else None),
                          tuple((entry or {}).get("findings") or ()))
        self.tracks[pod.key] = PodTrack(
            uid=pod.uid, observation=observation, received_at=time.monotonic(), verdict=verdict,
            was_verified=reason in (Reason.VERIFIED, Reason.INTERFACE_CHANGED),
            # A True is never restored as stale: check_stale would skip it; it must be renewed by a report
            # within staleAfter, or it is written False (a ReportStale True someone else wrote never stands).
            stale=reason is Reason.REPORT_STALE and verdict.status != "True", written=verdict.condition, proxied=reason is Reason.QUARANTINED)


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
