"""Taking a report in: an authenticated report recorded for its pod and judged; the definitions of full
reports held per resource, so that a digest-only report can be judged with them.

A mixin of :class:`lockstep.operator.reconciler.Reconciler`, whose ``__init__`` sets the state below.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lockstep.operator.judge import Policy, Verdict, short_digest
from lockstep.operator.status import PodTrack

from lockstep.core.replay import ReportStamp
from lockstep.core.report import Observation, ProxyReport

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache, PodRecord

__all__ = ["HELD_PER_RESOURCE", "DefinitionsRequired", "Intake"]

Key = tuple[str, str]
#: Definitions kept per resource for digest-only reports, by aggregate digest (the most recently used).
HELD_PER_RESOURCE = 32


class DefinitionsRequired(Exception):
    """A digest-only report the operator cannot take: it holds no definitions for the digest (a restart,
    another replica), or taking it would make the pod's condition True (only a full report may do that).
    The sidecar sends the report again at once, with its definitions."""


class Intake:
    cache: ClusterCache
    tracks: dict[Key, PodTrack]
    #: Per resource: observations with definitions from accepted full reports, by aggregate digest
    #: (digests are content addresses: any pod of the resource may send digests only for them).
    _held: dict[Key, dict[str, Observation]]

    if TYPE_CHECKING:  # in the other parts of the Reconciler
        async def _judge_pod(self, key: Key) -> Verdict | None: ...
        def _judge_once(self, observation: Observation, policy: Policy, was_verified: bool,
                        proxied: bool = False) -> Verdict: ...
        async def _record_withheld(self, pod: PodRecord, proxy: ProxyReport) -> None: ...

    async def accept(self, pod: PodRecord, observation: Observation,
                     proxy: ProxyReport | None = None, *, stamp: ReportStamp | None = None) -> Verdict | None:
        """Record an authenticated report for ``pod`` and judge it; None when nothing selects the pod.
        ``proxy``: the report's proxy section (the sidecar runs the in-line proxy).
        A digest-only report (no definitions) is judged with the definitions held for its digest, or
        refused with DefinitionsRequired."""
        if observation.digest is not None:
            if observation.definitions is None:
                observation = self._with_held_definitions(pod, observation, proxy is not None)
            else:
                self._hold(pod, observation)
        track = self.tracks.get(pod.key)
        if track is None or track.uid != pod.uid:
            track = self.tracks[pod.key] = PodTrack(uid=pod.uid)
        track.observation = observation
        track.received_at = time.monotonic()
        track.stale = False
        track.proxied = proxy is not None
        track.stamp = stamp or track.stamp
        if proxy is not None and proxy.withheld:
            await self._record_withheld(pod, proxy)
        return await self._judge_pod(pod.key)

    def _hold(self, pod: PodRecord, observation: Observation) -> None:
        """Keep the definitions of a full report (checked against its digests by Observation.from_dict)."""
        assert observation.digest is not None
        for record in self.cache.selecting(pod):
            held = self._held.setdefault(record.key, {})
            held.pop(observation.digest.digest, None)
            held[observation.digest.digest] = observation
            if len(held) > HELD_PER_RESOURCE:
                del held[next(iter(held))]

    def _with_held_definitions(self, pod: PodRecord, observation: Observation, proxied: bool) -> Observation:
        """The digest-only ``observation`` with the definitions held for its digest, re-checked: the held
        report's digests (formula, every component, aggregate) must be the reported ones. Raises
        DefinitionsRequired when none are held, or when the verdict would turn the pod's condition True:
        a pod becomes True only on a report whose definitions were digested again here."""
        assert observation.digest is not None
        resources = self.cache.selecting(pod)
        if len(resources) != 1:
            raise DefinitionsRequired("the pod is not selected by exactly one MCPServerInterface")
        held = self._held.get(resources[0].key, {}).get(observation.digest.digest)
        if held is None or held.digest != observation.digest or held.definitions is None:
            raise DefinitionsRequired(f"no definitions held for {short_digest(observation.digest.digest)}")
        track = self.tracks.get(pod.key)
        current = track.verdict if track is not None and track.uid == pod.uid and not track.stale else None
        full = held.restamped(observation.observed_at, observation.view)
        verdict = self._judge_once(full, resources[0].policy, bool(track and track.uid == pod.uid and
                                                                   track.was_verified), proxied)
        if verdict.status == "True" and (current is None or current.status != "True"):
            raise DefinitionsRequired("a digest-only report cannot make the pod's condition True")
        return full
