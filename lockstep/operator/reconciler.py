"""The reconciler: keeps pods' conditions and resources' status in line with the verdicts.

It is fed by kopf's watch events (pods, MCPServerInterfaces, Services), by accepted reports and by the
stale timer. Everything it needs survives a restart in the cluster itself (lockstep.operator.restore).
With several replicas each sees every event, and acts only for the resources it owns, with their pods
(``owns``, from lockstep.operator.peering); :meth:`Reconciler.rebalance` follows a change of owners.

The class is one object in parts, one module per subject; this module holds the state, the watch
events, the timers and the judging:

- lockstep.operator.intake: a report taken in, the definitions held for digest-only reports;
- lockstep.operator.conditions: a verdict applied to a pod, the pod condition written;
- lockstep.operator.verdict_events: the Events of verdict changes, batched per resource;
- lockstep.operator.status_writer: the resources' status, written on the flush timer;
- lockstep.operator.quarantine: withheld components, the approved answer, Services bypassing the proxy;
- lockstep.operator.restore: the last verdicts rebuilt from the cluster at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.conditions import ConditionWrites, VerdictNotWritten, condition_of
from lockstep.operator.config import OperatorConfig
from lockstep.operator.events import EventPoster, resource_ref
from lockstep.operator.freshness import OperatorClock, StaleReport
from lockstep.operator.intake import DefinitionsRequired, Intake
from lockstep.operator.judge import (
    CONDITION_TYPE,
    Policy,
    Reason,
    Verdict,
    judge,
    judge_conflict,
    judge_outside_policy,
    judge_stale,
    short_digest,
)
from lockstep.operator.kube import KubeApiError, KubeClient
from lockstep.operator.metrics import Metrics
from lockstep.operator.observed_maps import ObservedMaps
from lockstep.operator.outage import ApiUnavailable
from lockstep.operator.quarantine import Quarantine
from lockstep.operator.restore import Restore, memory_from_status, small_enough, trusted_revision
from lockstep.operator.status import PodTrack, ResourceMemory, now_iso
from lockstep.operator.status_writer import StatusWriter
from lockstep.operator.verdict_events import VerdictEvents

from lockstep.core.report import Observation
from lockstep.core.revision import Revision

__all__ = ["DefinitionsRequired", "Reconciler"]

logger = logging.getLogger(__name__)
Key = tuple[str, str]
VERDICT_CACHE_SIZE = 4096


class Reconciler(Intake, ConditionWrites, StatusWriter, Quarantine, Restore):
    def __init__(self, config: OperatorConfig, client: KubeClient, metrics: Metrics, events: EventPoster,
                 owns: Callable[[str], bool] | None = None, clock: OperatorClock | None = None, *,
                 alone: Callable[[], bool] | None = None) -> None:
        self.config = config
        #: The operator's own progress: a pod's silence never includes a pause of the operator.
        self.clock = clock or OperatorClock()
        #: Pods whose verdict could not be written (the API server was away): written when it is back.
        self.unwritten: set[Key] = set()
        self.client = client
        self.metrics = metrics
        self.events = events
        self.verdict_events = VerdictEvents(events)
        #: Whether this replica owns an ownership key (owner_key), and whether it is the only replica (then
        #: it owns everything, and no key is computed); the resources it owned at the last rebalance.
        self.owns: Callable[[str], bool] = owns or (lambda key: True)
        self.alone: Callable[[], bool] = alone or (lambda: owns is None)
        self._owned: set[Key] = set()
        self.cache = ClusterCache()
        self.tracks: dict[Key, PodTrack] = {}
        self.memory: dict[Key, ResourceMemory] = {}
        self._approved_answers = {}
        self.services = {}
        self.synced = asyncio.Event()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._dirty = set()
        self._urgent = set()
        self.status_urgent = asyncio.Event()
        self._written = {}
        self._status_patched_at: dict[Key, float] = {}
        self._verdicts: dict[tuple[Any, ...], Verdict] = {}
        self._held = {}
        self._children = {}
        self.observed_maps = ObservedMaps(client, size_limit=config.observed_configmap_size_limit,
                                          count_limit=config.observed_configmap_limit)

    # ------------------------------------------------------------------ ownership among replicas
    @staticmethod
    def owner_key(namespace: str, name: str) -> str:
        """A resource's key for choosing its owner."""
        return f"{namespace}/{name}"

    def owns_resource(self, key: Key) -> bool:
        return self.alone() or self.owns(self.owner_key(*key))

    def pod_owner_key(self, pod: PodRecord) -> str:
        """A pod goes with the resource that selects it (the first by name when several do: a conflict);
        a pod no resource selects is owned by its own key."""
        resources = self.cache.selecting(pod)
        if resources:
            return self.owner_key(*min(record.key for record in resources))
        return f"{pod.namespace}/pods/{pod.name}"

    def owns_pod(self, pod: PodRecord) -> bool:
        return self.alone() or self.owns(self.pod_owner_key(pod))

    async def rebalance(self) -> None:
        """The replicas changed: forget the pods of resources now owned by another replica (it writes
        them from now on), and rebuild from the cluster the verdicts of those this replica gained, as at
        a start: every gained pod gets a whole staleAfter to report here."""
        owned = {record.key for record in self.cache.resources() if self.owns_resource(record.key)}
        gained, lost = owned - self._owned, self._owned - owned
        self._owned = owned
        for key in list(self.tracks):
            pod = self.cache.pod(*key)
            if pod is None or not self.owns_pod(pod):
                del self.tracks[key]
                self.unwritten.discard(key)
        for key in lost:
            self._written.pop(key, None)
            self.verdict_events.forget(key)
            self.metrics.forget_resource(*key)  # the owner exports its gauges now (dashboards take the max)
        for key in gained:
            record = self.cache.resource(*key)
            if record is not None:
                self.memory[key] = memory_from_status(record.status)
                self._written.pop(key, None)
        for pod in self.cache.pods():
            self._restore_track(pod)
        self._dirty.update(gained)
        if gained or lost:
            logger.info("Owner of %d resources now (%d gained, %d handed over).", len(owned), len(gained), len(lost))

    # ------------------------------------------------------------------ watch events
    async def on_resource(self, event_type: str, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        if event_type == "DELETED":
            previous = self.cache.drop_resource(namespace, name)
            self._owned.discard((namespace, name))
            self.memory.pop((namespace, name), None)
            self._approved_answers.pop((namespace, name), None)
            self._held.pop((namespace, name), None)
            self.verdict_events.forget((namespace, name))
            for child in [child for child in self._children if child[:2] == (namespace, name)]:
                del self._children[child]
            self._written.pop((namespace, name), None)
            self._status_patched_at.pop((namespace, name), None)
            self.observed_maps.forget((namespace, name))
            self.metrics.forget_resource(namespace, name)
            if previous and self.synced.is_set():
                await self._judge_all(self.cache.selected_pods(namespace, name, previous.policy.selector))
            return
        previous, record = self._put_resource(body)
        if not self.owns_resource(record.key):
            self._owned.discard(record.key)
            return  # another replica's (lockstep.operator.peering)
        self._dirty.add(record.key)
        if not self.synced.is_set():
            return
        if record.key not in self._owned:
            self._owned.add(record.key)
            for pod in self.cache.selected_pods(*record.key):
                self._restore_track(pod)
        changed = previous is None or previous.policy.judging_key != record.policy.judging_key
        moved = previous is not None and previous.policy.selector != record.policy.selector
        if not (changed or moved):
            return
        pods = {pod.key: pod for pod in self.cache.selected_pods(namespace, name)}
        if previous is not None and moved:
            for pod in self.cache.selected_pods(namespace, name, previous.policy.selector):
                pods.setdefault(pod.key, pod)
        before = {key: self._verdict_reason(key) for key in pods}
        await self._judge_all(pods.values())
        restored = [key for key in pods if before[key] is not Reason.VERIFIED
                    and self._verdict_reason(key) is Reason.VERIFIED]
        if previous is not None and restored and record.policy.approved:
            await self.events.post(resource_ref(namespace, name, record.policy.uid), "Normal", "Approved",
                                   f"revision {short_digest(record.policy.approved[-1].aggregate)} approved: "
                                   f"{len(restored)} pods verified again")

    async def leave_shard(self, body: Mapping[str, Any]) -> None:
        """A resource relabelled out of this operator's --watch-label-selector is deleted as far as this
        operator knows: its pods, whose sidecars report here (this release injected them), are no longer
        verified (fail closed), whatever another release does with the resource. Moving a resource to
        another shard without cutting its pods: a copy in the new shard, then the pods (docs/scale.md)."""
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if self.cache.resource(*key) is not None:
            await self.on_resource("DELETED", body)

    def _put_resource(self, body: Mapping[str, Any]) -> tuple[ResourceRecord | None, ResourceRecord]:
        policy = Policy.from_resource(body)
        key = (policy.namespace, policy.name)
        status = dict(body.get("status") or {})
        memory = self.memory.get(key)
        if memory is None:
            memory = self.memory[key] = memory_from_status(status)
        if memory.trusted is not None and policy.trusted is None:
            # The status write that records the trust may not have come back through the watch yet.
            policy = dataclasses.replace(policy, trusted=trusted_revision(memory.trusted, policy.ignore))
        record = ResourceRecord(policy, status)
        return self.cache.put_resource(record), record

    async def on_pod(self, event_type: str, body: Mapping[str, Any]) -> None:
        record = PodRecord.from_body(body)
        if event_type == "DELETED":
            self.cache.drop_pod(record.namespace, record.name)
            self.tracks.pop(record.key, None)
            self._locks.pop(record.key, None)
            self._dirty.update(resource.key for resource in self.cache.selecting(record))
            return
        previous = self.cache.put_pod(record)
        track = self.tracks.get(record.key)
        if track is not None and track.uid != record.uid:  # a new pod with the same name
            del self.tracks[record.key]
        if previous is None or not self.synced.is_set():
            if self.synced.is_set():
                self._restore_track(record)
                self._dirty.update(resource.key for resource in self.cache.selecting(record))
            return
        if (previous.labels, previous.binding) != (record.labels, record.binding):
            old = {resource.key for resource in self.cache.selecting(previous)}
            self._dirty.update(old | {resource.key for resource in self.cache.selecting(record)})
            self._restore_track(record)  # selected now by a resource this replica owns
            await self._judge_pod(record.key)
        elif record.deleting or not self.owns_pod(record):
            return
        elif record.key in self.tracks:
            written = self.tracks[record.key].written
            if written is not None and condition_of(record) != written and record.key not in self.unwritten:
                # Someone else wrote the condition (pods/status rights suffice), or a late event of an earlier
                # write: the pod is read, and the verdict written again unless it carries it.
                await self._rewrite(record.key)
        elif (condition_of(record) or ("",))[0] == "True":
            await self._foreign_condition(record)

    async def _rewrite(self, key: Key) -> None:
        """Write the pod's verdict again if the pod, as the API server has it now, does not carry it (a late
        watch event costs one read, a foreign write one read and the write); a write that fails is left to
        retry_unwritten."""
        lock = self._locks.get(key)
        if lock is not None and lock.locked():
            async with lock:  # a write in flight: the event was of the pod before it, the write's answer decides
                pass
            pod, track = self.cache.pod(*key), self.tracks.get(key)
            if pod is None or track is None or condition_of(pod) == track.written:
                return
        try:
            fresh = PodRecord.from_body(await self.client.get(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}"))
        except KubeApiError as error:
            if error.status != 404:
                self.unwritten.add(key)  # judged and written again by retry_unwritten: fail closed
            return
        except ApiUnavailable:
            self.unwritten.add(key)
            return
        with contextlib.suppress(VerdictNotWritten, ApiUnavailable, StaleReport):  # a failed write is in unwritten
            track = self.tracks.get(key)
            if track is None or fresh.uid != track.uid:
                return
            self.cache.put_pod(fresh)
            if condition_of(fresh) == track.written:
                return  # a late event: the pod carries the verdict
            logger.warning("Pod %s/%s carries %s %s that Lockstep did not write: writing the verdict %s again",
                           key[0], key[1], CONDITION_TYPE, condition_of(fresh), track.written)
            await self._judge_pod(key)

    async def _foreign_condition(self, pod: PodRecord) -> None:
        """A pod that has not reported to this operator carries ``interface-verified=True``: anyone with
        pods/status rights can write it. With one resource selecting the pod it stands as a restored
        verdict would (a write of the previous leader can arrive after a hand-over): the pod gets
        staleAfter to report, then is ReportStale. With none or several, Lockstep would never have
        written True: it is set False at once."""
        if self.config.watch_label_selector and not self.cache.selecting(pod):
            return  # a pod of another shard's resources (lockstep.operator.shard): judged by its own release
        self.tracks[pod.key] = PodTrack(uid=pod.uid, received_at=time.monotonic(), written=condition_of(pod))
        if len(self.cache.selecting(pod)) == 1:
            logger.warning("Pod %s/%s carries %s=True that this operator did not write: it stands for staleAfter "
                           "unless the pod reports", pod.namespace, pod.name, CONDITION_TYPE)
            return
        logger.warning("Pod %s/%s carries %s=True that Lockstep did not write: setting it False",
                       pod.namespace, pod.name, CONDITION_TYPE)
        await self._judge_pod(pod.key)

    # ------------------------------------------------------------------ timers
    async def check_stale(self) -> None:
        """ReportStale for pods silent for staleAfter while the operator listened: the clock's look
        comes first, so a pause of the operator that just ended restarts every pod's window (the
        reports that waited during the pause are read before anyone is blamed)."""
        now = self.clock.now()
        for key, track in list(self.tracks.items()):
            if track.stale or (track.observation is None and (track.written or ("",))[0] != "True"):
                continue  # a True without an observation (restored from the cluster) must be renewed too
            pod = self.cache.pod(*key)
            resources = self.cache.selecting(pod) if pod else []
            if pod is not None and not self.owns_pod(pod):
                continue  # handed over: dropped at the rebalance
            if len(resources) == 1 and self.clock.silence(track.received_at, now) > resources[0].policy.stale_after:
                track.stale = True
                try:
                    await self._judge_pod(key)
                except ApiUnavailable:
                    return  # written by retry_unwritten once the API server is back
                except VerdictNotWritten:
                    continue  # in unwritten: retried every write_retry_interval

    async def retry_unwritten(self) -> None:
        """Write the verdicts that did not land (an outage, or an error of one write) until each lands or
        its pod is gone; stops at an outage (ApiUnavailable), goes on past a pod whose write fails again."""
        for key in list(self.unwritten):
            self.unwritten.discard(key)
            pod = self.cache.pod(*key)
            if pod is None:
                continue
            try:
                await self._judge_pod(key)
            except VerdictNotWritten:
                continue  # back in unwritten: the next round tries again
            except StaleReport:
                continue  # a True over a newer stamp: the next report decides
            finally:
                self.metrics.verdicts_unwritten.set(len(self.unwritten))

    # ------------------------------------------------------------------ for the report endpoint
    def selecting(self, pod: PodRecord) -> list[ResourceRecord]:
        return self.cache.selecting(pod)

    # ------------------------------------------------------------------ judging
    async def _judge_all(self, pods: Iterable[PodRecord]) -> None:
        await asyncio.gather(*(self._judge_pod(pod.key) for pod in pods))

    async def _judge_pod(self, key: Key) -> Verdict | None:
        lock = self._locks.get(key)
        if lock is None:  # (setdefault would build a Lock on every call)
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            pod = self.cache.pod(*key)
            track = self.tracks.get(key)
            if pod is None or track is None or not self.owns_pod(pod):
                return None  # gone, never reported, or another replica's to write
            resources = self.cache.selecting(pod)
            if not resources:
                if track.written is not None and track.written[0] == "True":
                    await self._unselected(pod, track)  # its resource is gone: fail closed
                return None
            if len(resources) > 1:
                verdict = judge_conflict([record.policy.name for record in resources])
            elif pod.outside_policy:
                verdict = judge_outside_policy(resources[0].policy, pod.outside_policy)
            elif track.stale:
                verdict = judge_stale(resources[0].policy, time.monotonic() - track.received_at)
            elif track.observation is None:
                return track.verdict
            else:
                verdict = self._judge_once(track.observation, resources[0].policy, track.was_verified,
                                           track.proxied)
                if verdict.trusts is not None:
                    self._trust(resources[0], verdict.trusts, pod)
            await self._apply(pod, track, verdict, resources)
            return verdict

    def _judge_once(self, observation: Observation, policy: Policy, was_verified: bool,
                    proxied: bool = False) -> Verdict:
        """Judge, reusing the verdict of an identical observation of another pod (same aggregate
        digest, so the same definitions) under the same policy: the diff runs once per revision."""
        if observation.digest is None:
            return judge(observation, policy, was_verified=was_verified, proxied=proxied)
        key = (policy.namespace, policy.name, policy.judging_key, observation.digest.digest,
               observation.definitions is not None, was_verified, proxied, observation.server_exposed)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = judge(observation, policy, was_verified=was_verified, proxied=proxied)
            if verdict.trusts is None:
                self._verdicts[key] = verdict
                if len(self._verdicts) > VERDICT_CACHE_SIZE:
                    del self._verdicts[next(iter(self._verdicts))]
        return verdict

    def _trust(self, record: ResourceRecord, revision: Revision, pod: PodRecord) -> None:
        entry = revision.to_spec(with_definitions=small_enough(revision, self.config.status_definitions_limit))
        entry.update({"trustedAt": now_iso(), "pod": pod.name})
        self.memory.setdefault(record.key, ResourceMemory()).trusted = entry
        record.policy = dataclasses.replace(record.policy, trusted=revision)
        logger.info("%s/%s: trusting interface %s on first use (pod %s).", *record.key,
                    short_digest(revision.aggregate), pod.name)
