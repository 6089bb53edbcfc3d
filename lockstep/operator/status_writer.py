"""The MCPServerInterface status, written on the flush timer: the resources marked since the last flush
get their status built (lockstep.operator.status) and written when it changed; a resource marked urgent
(a pod just cut) is written at the next flush whatever status_write_interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lockstep.operator.judge import PodState
from lockstep.operator.kube import KubeApiError
from lockstep.operator.outage import ApiUnavailable
from lockstep.operator.state import Key, State
from lockstep.operator.status import build_status, finding_counts

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache, ResourceRecord
    from lockstep.operator.config import OperatorConfig
    from lockstep.operator.kube import KubeClient
    from lockstep.operator.metrics import Metrics
    from lockstep.operator.observed_maps import ObservedMaps
    from lockstep.operator.quarantine import QuarantineBook
    from lockstep.operator.replicas.ownership import Ownership
    from lockstep.operator.verdict_events import VerdictEvents

__all__ = ["StatusWriter"]

logger = logging.getLogger(__name__)
#: Status writes in flight at once during a flush.
FLUSH_CONCURRENCY = 8


class StatusWriter:
    def __init__(self, config: OperatorConfig, state: State, cache: ClusterCache, client: KubeClient,
                 ownership: Ownership, quarantine: QuarantineBook, observed_maps: ObservedMaps, metrics: Metrics,
                 verdict_events: VerdictEvents, *, now: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        #: The clock status_write_interval is counted on (monotonic seconds); a test drives its own.
        self.now = now
        self.state = state
        self.cache = cache
        self.client = client
        self.ownership = ownership
        self.quarantine = quarantine
        self.observed_maps = observed_maps
        self.metrics = metrics
        self.verdict_events = verdict_events

    async def flush(self, *, final: bool = False) -> None:
        """Write the status of every dirty resource this replica owns, FLUSH_CONCURRENCY at a time (one
        after the other, 1,000 dirty resources took 9-15 s of wall time: docs/scale.md)."""
        await self.verdict_events.post_batched(everything=final)
        state = self.state
        dirty, state.dirty = state.dirty, set()
        urgent, state.urgent = state.urgent & dirty, state.urgent - dirty
        slots = asyncio.Semaphore(FLUSH_CONCURRENCY)

        now = self.now()
        spacing = 0.0 if final else self.config.status_write_interval

        async def flush(key: Key) -> None:
            record = self.cache.resource(*key)
            if record is None or not self.ownership.owns_resource(key):  # another replica's is its own to write
                return
            patched_at = state.resource(key).patched_at
            if key not in urgent and patched_at is not None and now - patched_at < spacing:
                state.dirty.add(key)  # written a moment ago: this change goes with the next write
                return
            async with slots:
                try:
                    await self._write_status(record)
                except (KubeApiError, OSError) as error:
                    if not isinstance(error, ApiUnavailable):  # an outage is logged once, by lockstep.operator.outage
                        logger.warning("Cannot write the status of %s/%s: %s", *key, error)
                    state.dirty.add(key)  # written at a later flush, urgent still if it was
                    if key in urgent:
                        state.urgent.add(key)

        await asyncio.gather(*(flush(key) for key in dirty))

    async def _write_status(self, record: ResourceRecord) -> None:
        policy = record.policy
        pods = [(pod, self.state.tracks.get(pod.key)) for pod in self.cache.selected_pods(*record.key)]
        resource = self.state.resource(record.key)
        memory = resource.memory
        await self.quarantine.check_bypassing(record, memory)
        previous = resource.written_status or record.status
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
            resource.patched_at = self.now()
        resource.written_status = status
        await self.observed_maps.prune(record.key, unwanted)  # only once status no longer points at them


def _same_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Equal but for lastVerificationTime, which alone never causes a write (the metric
    lockstep_last_verification_timestamp_seconds carries the live value)."""
    return all(old.get(key) == value for key, value in new.items() if key != "lastVerificationTime")
