"""The Events of verdict changes: one on the pod for each of its transitions, within the Event budget
of lockstep.operator.events (a fleet rollout spends it at once: past it the pod's change is told by its
condition and its resource's Event); on its MCPServerInterface at most one per reason and
RESOURCE_EVENT_WINDOW, the changes after it counted into one Event at the end of the window, naming the
pods (a fleet rollout posts one Event per resource, not one per pod)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from lockstep.operator.events import EventPoster, pod_ref, resource_ref
from lockstep.operator.judge import Reason, Verdict

if TYPE_CHECKING:
    from lockstep.operator.cache import PodRecord, ResourceRecord

__all__ = ["EVENT_PODS_NAMED", "RESOURCE_EVENT_WINDOW", "VerdictEvents"]

Key = tuple[str, str]
#: A resource gets at most one Event per verdict reason in this many seconds: the first change at once,
#: the changes after it in one Event at the end of the window, with their count (a fleet rollout
#: posts one Event per resource, not one per pod).
RESOURCE_EVENT_WINDOW = 10.0
#: Pods named in an aggregated Event's message.
EVENT_PODS_NAMED = 5


class VerdictEvents:
    """Posts the Events of verdict changes, batching those of a resource."""

    def __init__(self, events: EventPoster) -> None:
        self.events = events
        #: When each resource last got an Event, and the verdict changes waiting for the end of its
        #: window, by (resource, event type, reason): the resource's reference, the pods and the first
        #: pod's message.
        self._resource_event_at: dict[Key, float] = {}
        self._batched: dict[tuple[Key, str, str], tuple[dict[str, Any], list[str], str]] = {}

    def forget(self, key: Key) -> None:
        """A deleted resource: its window and the Events waiting for its end are dropped."""
        self._resource_event_at.pop(key, None)
        for batch in [batch for batch in self._batched if batch[0] == key]:
            del self._batched[batch]

    async def announce(self, pod: PodRecord, verdict: Verdict, resources: list[ResourceRecord]) -> None:
        """An Event on the pod for each of its transitions; on the resource, at most one per reason and
        RESOURCE_EVENT_WINDOW (the rest are counted into one Event at the end of the window)."""
        kind = "Normal" if verdict.status == "True" and verdict.reason is Reason.VERIFIED else "Warning"
        await self.events.post(pod_ref(pod.namespace, pod.name, pod.uid), kind, verdict.reason.value, verdict.message,
                               skippable=True)
        now = time.monotonic()
        for record in resources:
            ref = resource_ref(record.policy.namespace, record.policy.name, record.policy.uid)
            batch = (record.key, kind, verdict.reason.value)
            if batch not in self._batched and now - self._resource_event_at.get(record.key, -1e9) \
                    >= RESOURCE_EVENT_WINDOW:
                self._resource_event_at[record.key] = now
                await self.events.post(ref, kind, verdict.reason.value, f"pod {pod.name}: {verdict.message}")
                continue
            _, pods, _ = self._batched.setdefault(batch, (ref, [], f"pod {pod.name}: {verdict.message}"))
            pods.append(pod.name)

    async def post_batched(self, *, everything: bool = False) -> None:
        """Post the resource Events whose window has ended (``everything``: all of them, at shutdown)."""
        now = time.monotonic()
        for batch in list(self._batched):
            key, kind, reason = batch
            if not everything and now - self._resource_event_at.get(key, -1e9) < RESOURCE_EVENT_WINDOW:
                continue
            ref, pods, message = self._batched.pop(batch)
            self._resource_event_at[key] = now
            if len(pods) == 1:
                await self.events.post(ref, kind, reason, message)
                continue
            named = ", ".join(pods[:EVENT_PODS_NAMED]) + (f" and {len(pods) - EVENT_PODS_NAMED} more"
                                                         if len(pods) > EVENT_PODS_NAMED else "")
            await self.events.post(ref, kind, reason, f"{len(pods)} pods {reason}: {named}; the first, {message}",
                                   count=len(pods))
