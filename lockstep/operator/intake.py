"""Taking a report in: an authenticated report recorded for its pod; the definitions of full reports held
per resource, so that a digest-only report can be judged with them. Judging is the reconciler's.
"""

from __future__ import annotations

import time

from lockstep.operator.cache import ClusterCache, PodRecord
from lockstep.operator.judge import short_digest
from lockstep.operator.state import PodTrack, State

from lockstep.core.replay import ReportStamp
from lockstep.core.report import Observation

__all__ = ["HELD_PER_RESOURCE", "DefinitionsRequired", "Intake"]

#: Definitions kept per resource for digest-only reports, by aggregate digest (the most recently used).
HELD_PER_RESOURCE = 32


class DefinitionsRequired(Exception):
    """A digest-only report the operator cannot take: it holds no definitions for the digest (a restart,
    another replica), or taking it would make the pod's condition True (only a full report may do that).
    The sidecar sends the report again at once, with its definitions."""


class Intake:
    def __init__(self, state: State, cache: ClusterCache) -> None:
        self.state = state
        self.cache = cache

    def record(self, pod: PodRecord, observation: Observation, *, proxied: bool,
               stamp: ReportStamp | None) -> PodTrack:
        """The pod's track, with ``observation`` as its latest report (received now)."""
        track = self.state.tracks.get(pod.key)
        if track is None or track.uid != pod.uid:
            track = self.state.tracks[pod.key] = PodTrack(uid=pod.uid)
        track.observation = observation
        track.received_at = time.monotonic()
        track.stale = False
        track.proxied = proxied
        track.stamp = stamp or track.stamp
        return track

    def hold(self, pod: PodRecord, observation: Observation) -> None:
        """Keep the definitions of a full report (checked against its digests by Observation.from_dict)."""
        assert observation.digest is not None
        for record in self.cache.selecting(pod):
            held = self.state.resource(record.key).held
            held.pop(observation.digest.digest, None)
            held[observation.digest.digest] = observation
            if len(held) > HELD_PER_RESOURCE:
                del held[next(iter(held))]

    def with_held_definitions(self, pod: PodRecord, observation: Observation) -> Observation:
        """The digest-only ``observation`` with the definitions held for its digest, re-checked: the held
        report's digests (formula, every component, aggregate) must be the reported ones. Raises
        DefinitionsRequired when none are held."""
        assert observation.digest is not None
        resources = self.cache.selecting(pod)
        if len(resources) != 1:
            raise DefinitionsRequired("the pod is not selected by exactly one MCPServerInterface")
        state = self.state.resources.get(resources[0].key)
        held = state.held.get(observation.digest.digest) if state is not None else None
        if held is None or held.digest != observation.digest or held.definitions is None:
            raise DefinitionsRequired(f"no definitions held for {short_digest(observation.digest.digest)}")
        return held.as_reported_by(observation)
