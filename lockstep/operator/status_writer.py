"""The MCPServerInterface status, written on the flush timer: the resources marked since the last flush
get their status built (lockstep.operator.status) and written when it changed.

A mixin of :class:`lockstep.operator.reconciler.Reconciler`, whose ``__init__`` sets the state below.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lockstep.operator.judge import PodState
from lockstep.operator.kube import KubeApiError
from lockstep.operator.outage import ApiUnavailable
from lockstep.operator.status import ResourceMemory, build_status, finding_counts

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache, ResourceRecord
    from lockstep.operator.config import OperatorConfig
    from lockstep.operator.kube import KubeClient
    from lockstep.operator.metrics import Metrics
    from lockstep.operator.observed_maps import ObservedMaps
    from lockstep.operator.status import PodTrack
    from lockstep.operator.verdict_events import VerdictEvents

__all__ = ["StatusWriter"]

logger = logging.getLogger(__name__)
Key = tuple[str, str]
#: Status writes in flight at once during a flush.
FLUSH_CONCURRENCY = 8


class StatusWriter:
    config: OperatorConfig
    cache: ClusterCache
    client: KubeClient
    metrics: Metrics
    observed_maps: ObservedMaps
    verdict_events: VerdictEvents
    tracks: dict[Key, PodTrack]
    memory: dict[Key, ResourceMemory]
    #: Resources whose status is to be built (and written if it changed) at the next flush.
    _dirty: set[Key]
    #: The status last written per resource, and when (monotonic) it was last patched.
    _written: dict[Key, dict[str, Any]]
    _status_patched_at: dict[Key, float]
    #: Resources with a pod just cut (a verdict that turned False) or drifted: written at the next flush,
    #: whatever status_write_interval, so the status never says Verified about a pod just taken out.
    _urgent: set[Key]
    #: Set when a resource became urgent: the flush loop runs at once instead of at its next tick.
    status_urgent: asyncio.Event

    if TYPE_CHECKING:  # in lockstep.operator.quarantine
        async def _check_bypassing(self, record: ResourceRecord, memory: ResourceMemory) -> None: ...
        def owns_resource(self, key: Key) -> bool: ...  # in lockstep.operator.reconciler

    async def flush_status(self, *, final: bool = False) -> None:
        """Write the status of every dirty resource this replica owns, FLUSH_CONCURRENCY at a time (one
        after the other, 1,000 dirty resources took 9-15 s of wall time: docs/scale.md)."""
        await self.verdict_events.post_batched(everything=final)
        dirty, self._dirty = self._dirty, set()
        urgent, self._urgent = self._urgent & dirty, self._urgent - dirty
        slots = asyncio.Semaphore(FLUSH_CONCURRENCY)

        now = time.monotonic()
        spacing = 0.0 if final else self.config.status_write_interval

        async def flush(key: Key) -> None:
            record = self.cache.resource(*key)
            if record is None or not self.owns_resource(key):  # another replica's is its own to write
                return
            if key not in urgent and now - self._status_patched_at.get(key, -spacing) < spacing:
                self._dirty.add(key)  # written a moment ago: this change goes with the next write
                return
            async with slots:
                try:
                    await self._write_status(record)
                except (KubeApiError, OSError) as error:
                    if not isinstance(error, ApiUnavailable):  # an outage is logged once, by lockstep.operator.outage
                        logger.warning("Cannot write the status of %s/%s: %s", *key, error)
                    self._dirty.add(key)  # written at a later flush, urgent still if it was
                    if key in urgent:
                        self._urgent.add(key)

        await asyncio.gather(*(flush(key) for key in dirty))

    def mark_urgent(self, keys: set[Key]) -> None:
        """A pod of these resources was just cut or drifted: their status goes at the next flush, now."""
        self._dirty |= keys
        self._urgent |= keys
        self.status_urgent.set()

    async def _write_status(self, record: ResourceRecord) -> None:
        policy = record.policy
        pods = [(pod, self.tracks.get(pod.key)) for pod in self.cache.selected_pods(*record.key)]
        memory = self.memory.setdefault(record.key, ResourceMemory())
        await self._check_bypassing(record, memory)
        previous = self._written.get(record.key) or record.status
        status = build_status(policy, pods, memory, previous, definitions_limit=self.config.status_definitions_limit)
        revisions = {track.verdict.revision.aggregate: track.verdict.revision for _, track in pods
                     if track and track.verdict and track.verdict.revision is not None}
        order = {digest: index for index, digest in enumerate(memory.first_seen)}  # first seen, within a second
        unwanted = await self.observed_maps.place(
            policy, status, revisions, lambda entry: (entry.get("firstSeen") or "", order.get(entry["digest"], -1)))
        counts = {PodState(state): status["pods"][state] for state in (s.value for s in PodState)}
        self.metrics.set_pod_counts(policy.namespace, policy.name, counts)
        self.metrics.set_findings(policy.namespace, policy.name, finding_counts(status))
        if not _same_status(status, previous):
            if record.status.get("phase") and record.status.get("phase") != status["phase"] and previous:
                logger.info("%s/%s: phase %s -> %s", *record.key, record.status.get("phase"), status["phase"])
            await self.client.merge_patch(self.client.resource_status_path(*record.key), {"status": status})
            self._status_patched_at[record.key] = time.monotonic()
        self._written[record.key] = status
        await self.observed_maps.prune(record.key, unwanted)  # only once status no longer points at them


def _same_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Equal but for lastVerificationTime, which alone never causes a write (the metric
    lockstep_last_verification_timestamp_seconds carries the live value)."""
    return all(old.get(key) == value for key, value in new.items() if key != "lastVerificationTime")
