"""The version-skew policy in the report path: each judged report's ``sidecarVersion`` classified
(lockstep.core.skew), a Warning Event ``SidecarOutsideSkewPolicy`` once per pod outside the policy, and the
pods counted by version in ``lockstep_sidecar_versions``.

Nothing here touches a verdict: the report has been judged as usual before it is observed here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockstep import __version__
from lockstep.operator.cache import PodRecord
from lockstep.operator.events import EventPoster, pod_ref
from lockstep.operator.metrics import Metrics

from lockstep.core.skew import Skew, SkewClass, Version, classify

if TYPE_CHECKING:
    from lockstep.operator.reconciler import Reconciler

__all__ = ["EVENT_REASON", "MAX_VERSION_LABELS", "SkewWatch"]

logger = logging.getLogger(__name__)

EVENT_REASON = "SidecarOutsideSkewPolicy"
#: Distinct ``version`` label values of lockstep_sidecar_versions; past them a version counts as ``other``.
MAX_VERSION_LABELS = 20
#: Classes kept by reported version string (a pod may report any string: bounded, the oldest go first).
CLASSES_KEPT = 256

Key = tuple[str, str]


@dataclass
class _Seen:
    uid: str
    label: tuple[str, str]  # (version, supported) of lockstep_sidecar_versions
    warned: bool


class SkewWatch:
    """Per pod, the policy's class of its sidecar's last reported version."""

    def __init__(self, metrics: Metrics, events: EventPoster, *, alive: Callable[[Key, str], bool],
                 operator_version: str = __version__) -> None:
        self._events = events
        #: Whether a pod seen here (namespace and name, uid) is still this replica's to count: it exists with
        #: that uid, and is owned here.
        self._alive = alive
        operator = Version.parse(operator_version)
        if operator is None:
            raise ValueError(f"the operator's version {operator_version!r} is not a SemVer version")
        self.operator = operator
        self._pods: dict[Key, _Seen] = {}
        self._classes: dict[str | None, Skew] = {}
        self._versions: set[str] = set()  # version label values given out
        metrics.sidecar_versions.source = self.counts

    @classmethod
    def of(cls, reconciler: Reconciler, metrics: Metrics, operator_version: str = __version__) -> SkewWatch:
        """The watch of an operator's report endpoint: it counts the pods this replica owns."""
        def alive(key: Key, uid: str) -> bool:
            pod = reconciler.cache.pod(*key)
            return pod is not None and pod.uid == uid and not pod.deleting and reconciler.ownership.owns_pod(pod)
        return cls(metrics, reconciler.events, alive=alive, operator_version=operator_version)

    async def observe(self, pod: PodRecord, sidecar_version: str | None) -> Skew | None:
        """Classify the version of a report from ``pod`` judged just now; warn once per pod outside policy.
        Never raises (None: it failed, logged): a version is not worth failing a report."""
        try:
            return await self._observe(pod, sidecar_version)
        except Exception:
            logger.exception("Cannot check the sidecar version of pod %s/%s", pod.namespace, pod.name)
            return None

    async def _observe(self, pod: PodRecord, sidecar_version: str | None) -> Skew:
        skew = self._classify(sidecar_version)
        label = (self._version_label(skew), "true" if skew.supported else "false")
        seen = self._pods.get(pod.key)
        if seen is None or seen.uid != pod.uid:
            seen = self._pods[pod.key] = _Seen(pod.uid, label, warned=False)
        seen.label = label
        if not skew.supported and not seen.warned:
            seen.warned = True
            logger.warning("Pod %s/%s: %s", pod.namespace, pod.name, skew.message)
            await self._events.post(pod_ref(pod.namespace, pod.name, pod.uid), "Warning", EVENT_REASON,
                                    skew.message)
        return skew

    def counts(self) -> dict[tuple[str, str], int]:
        """Pods by (version, supported), for lockstep_sidecar_versions (pods gone or handed over dropped)."""
        gone = [key for key, seen in self._pods.items() if not self._alive(key, seen.uid)]
        for key in gone:
            del self._pods[key]
        counts: dict[tuple[str, str], int] = {}
        for seen in self._pods.values():
            counts[seen.label] = counts.get(seen.label, 0) + 1
        return counts

    def _classify(self, sidecar_version: str | None) -> Skew:
        skew = self._classes.get(sidecar_version)
        if skew is None:
            skew = self._classes[sidecar_version] = classify(self.operator, sidecar_version)
            if len(self._classes) > CLASSES_KEPT:
                del self._classes[next(iter(self._classes))]
        return skew

    def _version_label(self, skew: Skew) -> str:
        if skew.kind is SkewClass.MISSING:
            return "none"
        if skew.kind is SkewClass.INVALID:
            return "invalid"
        version = str(skew.sidecar)
        if version not in self._versions:
            if len(self._versions) >= MAX_VERSION_LABELS:
                return "other"
            self._versions.add(version)
        return version
