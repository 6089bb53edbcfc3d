"""The reconciler's memory, in one record: what it knows of each pod between reports (PodTrack), of each
resource between status writes (ResourceState), and the work waiting (dirty, urgent and unwritten keys).

Every part of the reconciler (lockstep.operator.reconciler) reads and writes this one State; forgetting a
pod or a resource is one call here, so no part can keep a piece of a resource that is gone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from lockstep.operator.judge import Reason, Verdict

from lockstep.core.replay import ReportStamp
from lockstep.core.report import Observation
from lockstep.core.wire import ApprovedComponents

__all__ = ["Key", "PodTrack", "ResourceMemory", "ResourceState", "State"]

#: A pod's or a resource's (namespace, name).
Key = tuple[str, str]


@dataclass
class PodTrack:
    """What the operator remembers about one pod between reports."""

    uid: str
    observation: Observation | None = None
    received_at: float = 0.0  # monotonic seconds
    verdict: Verdict | None = None
    was_verified: bool = False
    stale: bool = False
    #: The pod's last report came from a sidecar that runs the in-line proxy.
    proxied: bool = False
    #: The stamp of the last accepted report, written into the pod with the next verdict (replay
    #: protection that survives restarts: lockstep.core.replay).
    stamp: ReportStamp | None = None
    #: The condition (status, reason, message) last written: a pod event that shows another one (a late
    #: event, or someone else's write) gets the verdict written again.
    written: tuple[str, str, str] | None = None

    @property
    def written_true(self) -> bool:
        return self.written is not None and self.written[0] == "True"


@dataclass
class ResourceMemory:
    """Per resource, what its status is built from besides the pods: when each observed revision was first
    seen, the trusted-on-first-use record, what the proxies withheld and the Services that bypass them."""

    first_seen: dict[str, str] = field(default_factory=dict)
    trusted: dict[str, Any] | None = None
    last_verification: str | None = None
    definitions_size: dict[str, int] = field(default_factory=dict)
    #: Enforcement Quarantine: what the proxies withheld (newest first), and Services that bypass them.
    withheld: list[dict[str, Any]] = field(default_factory=list)
    bypassing: list[str] = field(default_factory=list)


@dataclass
class ResourceState:
    """Everything the operator keeps per MCPServerInterface."""

    memory: ResourceMemory = field(default_factory=ResourceMemory)
    #: Observations with definitions from accepted full reports, by aggregate digest, most recently used
    #: last (digests are content addresses: any pod of the resource may send digests only for them).
    held: dict[str, Observation] = field(default_factory=dict)
    #: The approved components sent to the resource's proxies, with the judging key they were built for.
    approved_answer: tuple[tuple[Any, ...], ApprovedComponents] | None = None
    #: The status last written, and when (monotonic) it was last patched.
    written_status: dict[str, Any] | None = None
    patched_at: float | None = None
    #: The verification counter and timestamp children of the metrics, by reason (labels() looked up once).
    metric_children: dict[Reason, tuple[Any, Any]] = field(default_factory=dict)


class State:
    """The pods tracked, the resources known, and the keys waiting for a write."""

    def __init__(self) -> None:
        self.tracks: dict[Key, PodTrack] = {}
        self.resources: dict[Key, ResourceState] = {}
        #: Resources whose status is to be built (and written if it changed) at the next flush.
        self.dirty: set[Key] = set()
        #: Resources with a pod just cut or drifted: written at the next flush, whatever
        #: status_write_interval, so the status never says Verified about a pod just taken out.
        self.urgent: set[Key] = set()
        #: Set when a resource became urgent: the flush runs at once instead of at its next tick.
        self.status_urgent = asyncio.Event()
        #: Pods whose verdict did not land: written again until it lands or the pod is gone (fail closed).
        self.unwritten: set[Key] = set()
        #: The resources this replica owned at the last rebalance.
        self.owned: set[Key] = set()
        self._locks: dict[Key, asyncio.Lock] = {}

    def resource(self, key: Key) -> ResourceState:
        state = self.resources.get(key)
        if state is None:
            state = self.resources[key] = ResourceState()
        return state

    def memory(self, key: Key) -> ResourceMemory:
        return self.resource(key).memory

    def lock(self, key: Key) -> asyncio.Lock:
        """The pod's lock: one verdict of a pod judged and written at a time."""
        lock = self._locks.get(key)
        if lock is None:  # (setdefault would build a Lock on every call)
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def writing(self, key: Key) -> asyncio.Lock | None:
        """The pod's lock while a verdict of it is being written, else None."""
        lock = self._locks.get(key)
        return lock if lock is not None and lock.locked() else None

    def mark_urgent(self, keys: set[Key]) -> None:
        """A pod of these resources was just cut or drifted: their status goes at the next flush, now."""
        self.dirty |= keys
        self.urgent |= keys
        self.status_urgent.set()

    def forget_pod(self, key: Key) -> None:
        self.tracks.pop(key, None)
        self.unwritten.discard(key)
        self._locks.pop(key, None)

    def forget_resource(self, key: Key) -> None:
        """Drop what is kept of a resource: it is deleted, or another replica owns it now (its status,
        held definitions and answers are rebuilt from the cluster if this replica gets it back)."""
        self.resources.pop(key, None)
        self.owned.discard(key)
        self.dirty.discard(key)
        self.urgent.discard(key)
