"""The reconciler: keeps pods' conditions and resources' status in line with the verdicts.

It is fed by kopf's watch events (pods, MCPServerInterfaces, Services), by accepted reports and by the
timers. Everything it needs survives a restart in the cluster itself (lockstep.operator.restore). With
several replicas each sees every event, and acts only for the resources it owns, with their pods
(lockstep.operator.replicas.ownership); :meth:`Reconciler.rebalance` follows a change of owners.

This module orchestrates; the state is one record and the work is done by parts, each built here with
what it uses:

- lockstep.operator.state: the pods tracked, per-resource state, the keys waiting for a write;
- lockstep.operator.intake: a report recorded, the definitions held for digest-only reports;
- lockstep.operator.conditions: a verdict applied to a pod (VerdictApplier), the condition written
  (ConditionWriter);
- lockstep.operator.verdict_events: the Events of verdict changes, batched per resource;
- lockstep.operator.status_writer: the resources' status, written on the flush timer;
- lockstep.operator.quarantine: withheld components, the approved answer, Services bypassing the proxy;
- lockstep.operator.restore: the last verdicts rebuilt from the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.conditions import ConditionWriter, VerdictApplier, VerdictNotWritten, condition_of
from lockstep.operator.config import OperatorConfig
from lockstep.operator.events import EventPoster, resource_ref
from lockstep.operator.freshness import OperatorClock, StaleReport
from lockstep.operator.intake import DefinitionsRequired, Intake
from lockstep.operator.judge import (
    CONDITION_TYPE,
    Policy,
    Reason,
    Verdict,
    VerdictMemo,
    judge_binding,
    judge_conflict,
    judge_outside_policy,
    judge_stale,
    short_digest,
    trusted_revision,
)
from lockstep.operator.kube import KubeApiError, KubeClient
from lockstep.operator.metrics import Metrics
from lockstep.operator.observed_maps import ObservedMaps
from lockstep.operator.outage import ApiUnavailable
from lockstep.operator.quarantine import QuarantineBook
from lockstep.operator.replicas.ownership import Ownership, Replicas
from lockstep.operator.restore import memory_from_status, restore_track, small_enough
from lockstep.operator.approval_trust import ApprovalTrust
from lockstep.operator.state import Key, PodTrack, State
from lockstep.operator.status import now_iso
from lockstep.operator.status_writer import StatusWriter
from lockstep.operator.verdict_events import VerdictEvents
from lockstep.operator.verdict_pulses import VerdictPulses

from lockstep.core.replay import ReportStamp
from lockstep.core.report import Observation, ProxyReport
from lockstep.core.revision import Revision
from lockstep.core.wire import ApprovedComponents

__all__ = ["DefinitionsRequired", "Reconciler"]

logger = logging.getLogger(__name__)


class Reconciler:
    def __init__(self, config: OperatorConfig, client: KubeClient, metrics: Metrics, events: EventPoster,
                 replicas: Replicas | None = None, clock: OperatorClock | None = None,
                 approval_trust: ApprovalTrust | None = None) -> None:
        self.config = config
        #: The operator's own progress: a pod's silence never includes a pause of the operator.
        self.clock = clock or OperatorClock()
        self.client = client
        self.metrics = metrics
        self.events = events
        self.synced = asyncio.Event()
        self.state = state = State()
        self.cache = cache = ClusterCache()
        self.ownership = Ownership(cache, replicas)
        self.verdict_events = VerdictEvents(events)
        self.observed_maps = ObservedMaps(client, size_limit=config.observed_configmap_size_limit,
                                          count_limit=config.observed_configmap_limit)
        self.intake = Intake(state, cache)
        self.quarantine = QuarantineBook(state, cache, events, metrics)
        self.verdicts = VerdictApplier(state, ConditionWriter(config, client, cache), metrics, events,
                                       self.verdict_events)
        self.status_writer = StatusWriter(config, state, cache, client, self.ownership, self.quarantine,
                                          self.observed_maps, metrics, self.verdict_events)
        self._memo = VerdictMemo()
        #: The MCPApprovalPolicy objects, and which approved revisions each resource may trust.
        self.approval_trust = approval_trust or ApprovalTrust()
        #: Wakes the verdict watches of a pod once it is judged (lockstep.operator.verdict_watch).
        self.pulses = VerdictPulses()

    # ------------------------------------------------------------------ start, and replicas
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
        self.state.owned = self.ownership.owned_resources()
        self.state.dirty.update(self.state.owned)
        self.synced.set()
        logger.info("Synced %d resources and %d pods; restored %d verdicts.",
                    sum(1 for _ in self.cache.resources()), sum(1 for _ in self.cache.pods()),
                    len(self.state.tracks))

    def _restore_track(self, pod: PodRecord) -> None:
        if pod.key in self.state.tracks or not self.ownership.owns_pod(pod):
            return
        track = restore_track(pod, self.cache.selecting(pod))
        if track is not None:
            self.state.tracks[pod.key] = track

    async def rebalance(self) -> None:
        """The replicas changed: forget the pods and resources now owned by another replica (it writes
        them from now on), and rebuild from the cluster the verdicts of those this replica gained, as at
        a start: every gained pod gets a whole staleAfter to report here."""
        state = self.state
        owned = self.ownership.owned_resources()
        gained, lost = owned - state.owned, state.owned - owned
        for key in list(state.tracks):
            pod = self.cache.pod(*key)
            if pod is None or not self.ownership.owns_pod(pod):
                state.forget_pod(key)
        for key in lost:
            self._forget_resource(key)  # the owner exports its gauges now (dashboards take the max)
        for key in gained:
            record = self.cache.resource(*key)
            if record is not None:
                state.forget_resource(key)
                state.resource(key).memory = memory_from_status(record.status)
        state.owned = owned
        for pod in self.cache.pods():
            self._restore_track(pod)
        state.dirty.update(gained)
        self.pulses.wake_all()  # a watch of a pod handed over is answered, and asked again of its new owner
        if gained or lost:
            logger.info("Owner of %d resources now (%d gained, %d handed over).", len(owned), len(gained), len(lost))

    def _forget_resource(self, key: Key) -> None:
        self.state.forget_resource(key)
        self.verdict_events.forget(key)
        self.metrics.forget_resource(*key)

    # ------------------------------------------------------------------ watch events
    async def on_resource(self, event_type: str, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        if event_type == "DELETED":
            previous = self.cache.drop_resource(namespace, name)
            self._forget_resource((namespace, name))
            self.approval_trust.forget((namespace, name))
            self.observed_maps.forget((namespace, name))
            if previous and self.synced.is_set():
                await self._judge_all(self.cache.selected_pods(namespace, name, previous.policy.selector))
            return
        previous, record = self._put_resource(body)
        if not self.ownership.owns_resource(record.key):
            self.state.owned.discard(record.key)
            return  # another replica's (lockstep.operator.replicas)
        self.state.dirty.add(record.key)
        if not self.synced.is_set():
            return
        if record.key not in self.state.owned:
            self.state.owned.add(record.key)
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

    async def retrust(self) -> None:
        """Judge again the pods of every resource whose trusted revisions changed: an MCPApprovalPolicy changed, or
        a signed statement or an approver key expired."""
        for key, policy in self.approval_trust.rejudged().items():
            record = self.cache.resource(*key)
            if record is None or record.policy.judging_key == policy.judging_key:
                continue
            record.policy = policy
            self._count_untrusted(policy)
            self.state.dirty.add(key)
            if self.synced.is_set() and self.ownership.owns_resource(key):
                await self._judge_all(self.cache.selected_pods(*key))

    def _count_untrusted(self, policy: Policy) -> None:
        if policy.untrusted or self.approval_trust.active:
            self.metrics.approvals_untrusted.labels(policy.namespace, policy.name).set(len(policy.untrusted))

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
        # Only what a signed approval vouches for, where an MCPApprovalPolicy enforces (lockstep.operator.approval_trust).
        policy = self.approval_trust.judged(Policy.from_resource(body), (body.get("spec") or {}).get("approved") or [])
        self._count_untrusted(policy)
        key = (policy.namespace, policy.name)
        status = dict(body.get("status") or {})
        resource = self.state.resources.get(key)
        if resource is None:
            resource = self.state.resource(key)
            resource.memory = memory_from_status(status)
        memory = resource.memory
        if memory.trusted is not None and policy.trusted is None:
            # The status write that records the trust may not have come back through the watch yet.
            policy = dataclasses.replace(policy, trusted=trusted_revision(memory.trusted, policy.ignore))
        record = ResourceRecord(policy, status)
        return self.cache.put_resource(record), record

    async def on_pod(self, event_type: str, body: Mapping[str, Any]) -> None:
        record = PodRecord.from_body(body)
        state = self.state
        if event_type == "DELETED":
            self.cache.drop_pod(record.namespace, record.name)
            state.forget_pod(record.key)
            state.dirty.update(resource.key for resource in self.cache.selecting(record))
            return
        cached = self.cache.pod(record.namespace, record.name)
        if cached is not None and record.resource_version and record.uid == cached.uid \
                and record.resource_version == cached.superseded_version:
            return  # the pod as it was before Lockstep's last write, arriving late: the cache holds the newer one
        previous = self.cache.put_pod(record)
        track = state.tracks.get(record.key)
        if track is not None and track.uid != record.uid:  # a new pod with the same name
            state.forget_pod(record.key)
        if previous is None or not self.synced.is_set():
            if self.synced.is_set():
                self._restore_track(record)
                state.dirty.update(resource.key for resource in self.cache.selecting(record))
            return
        if (previous.labels, previous.binding) != (record.labels, record.binding):
            old = {resource.key for resource in self.cache.selecting(previous)}
            state.dirty.update(old | {resource.key for resource in self.cache.selecting(record)})
            self._restore_track(record)  # selected now by a resource this replica owns
            await self._judge_pod(record.key)
        elif record.deleting or not self.ownership.owns_pod(record):
            return
        elif record.key in state.tracks:
            written = state.tracks[record.key].written
            if written is not None and condition_of(record) != written and record.key not in state.unwritten:
                # Someone else wrote the condition (pods/status rights suffice), or a late event of an earlier
                # write: the pod is read, and the verdict written again unless it carries it.
                await self._rewrite(record.key)
        elif record.condition_true:
            await self._foreign_condition(record)

    async def _rewrite(self, key: Key) -> None:
        """Write the pod's verdict again if the pod, as the API server has it now, does not carry it (a late
        watch event costs one read, a foreign write one read and the write); a write that fails is left to
        retry_unwritten."""
        lock = self.state.writing(key)
        if lock is not None:
            async with lock:  # a write in flight: the event was of the pod before it, the write's answer decides
                pass
            pod, track = self.cache.pod(*key), self.state.tracks.get(key)
            if pod is None or track is None or condition_of(pod) == track.written:
                return
        try:
            fresh = PodRecord.from_body(await self.client.get(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}"))
        except KubeApiError as error:
            if error.status != 404:
                self.state.unwritten.add(key)  # judged and written again by retry_unwritten: fail closed
            return
        except ApiUnavailable:
            self.state.unwritten.add(key)
            return
        with contextlib.suppress(VerdictNotWritten, ApiUnavailable, StaleReport):  # a failed write is in unwritten
            track = self.state.tracks.get(key)
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
        self.state.tracks[pod.key] = PodTrack(uid=pod.uid, received_at=time.monotonic(), written=condition_of(pod))
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
        for key, track in list(self.state.tracks.items()):
            if track.stale or (track.observation is None and not track.written_true):
                continue  # a True without an observation (restored from the cluster) must be renewed too
            pod = self.cache.pod(*key)
            resources = self.cache.selecting(pod) if pod else []
            if pod is not None and not self.ownership.owns_pod(pod):
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
        unwritten = self.state.unwritten
        for key in list(unwritten):
            unwritten.discard(key)
            if self.cache.pod(*key) is None:
                continue
            try:
                await self._judge_pod(key)
            except VerdictNotWritten:
                continue  # back in unwritten: the next round tries again
            except StaleReport:
                continue  # a True over a newer stamp: the next report decides
            finally:
                self.metrics.verdicts_unwritten.set(len(unwritten))

    async def flush_status(self, *, final: bool = False) -> None:
        await self.status_writer.flush(final=final)

    # ------------------------------------------------------------------ for the report endpoint
    def selecting(self, pod: PodRecord) -> list[ResourceRecord]:
        return self.cache.selecting(pod)

    def approved_for(self, pod: PodRecord) -> ApprovedComponents | None:
        return self.quarantine.approved_for(pod)

    async def on_service(self, event_type: str, body: Mapping[str, Any]) -> None:
        await self.quarantine.on_service(event_type, body)

    async def accept(self, pod: PodRecord, observation: Observation,
                     proxy: ProxyReport | None = None, *, stamp: ReportStamp | None = None) -> Verdict | None:
        """Record an authenticated report for ``pod`` and judge it; None when nothing selects the pod.
        ``proxy``: the report's proxy section (the sidecar runs the in-line proxy).
        A digest-only report (no definitions) is judged with the definitions held for its digest, or
        refused with DefinitionsRequired (none held, or it would make the pod's condition True: a pod
        becomes True only on a report whose definitions were digested again here)."""
        proxied = proxy is not None
        if observation.digest is not None:
            if observation.definitions is None:
                observation = self.intake.with_held_definitions(pod, observation)
                self._refuse_digest_only_true(pod, observation, proxied)
            else:
                self.intake.hold(pod, observation)
        self.intake.record(pod, observation, proxied=proxied, stamp=stamp)
        if proxy is not None and proxy.withheld:
            await self.quarantine.record_withheld(pod, proxy)
        return await self._judge_pod(pod.key)

    def _refuse_digest_only_true(self, pod: PodRecord, full: Observation, proxied: bool) -> None:
        track = self.state.tracks.get(pod.key)
        if track is not None and track.uid != pod.uid:
            track = None  # another pod of the same name
        current = track.verdict if track is not None and not track.stale else None
        [resource] = self.cache.selecting(pod)
        verdict = self._memo.judge(full, resource.policy, was_verified=track is not None and track.was_verified,
                                   proxied=proxied)
        if verdict.status == "True" and (current is None or current.status != "True"):
            raise DefinitionsRequired("a digest-only report cannot make the pod's condition True")

    # ------------------------------------------------------------------ judging
    async def _judge_all(self, pods: Iterable[PodRecord]) -> None:
        await asyncio.gather(*(self._judge_pod(pod.key) for pod in pods))

    async def _judge_pod(self, key: Key) -> Verdict | None:
        try:
            return await self._judge_pod_locked(key)
        finally:
            self.pulses.changed(key)  # its proxy's watch hears a new verdict or approved set at once

    async def _judge_pod_locked(self, key: Key) -> Verdict | None:
        async with self.state.lock(key):
            pod = self.cache.pod(*key)
            track = self.state.tracks.get(key)
            if pod is None or track is None or not self.ownership.owns_pod(pod):
                return None  # gone, never reported, or another replica's to write
            resources = self.cache.selecting(pod)
            if not resources:
                if track.written_true:
                    await self.verdicts.unselected(pod, track)  # its resource is gone: fail closed
                return None
            if len(resources) > 1:
                verdict = judge_conflict([record.policy.name for record in resources])
            elif pod.outside_policy:
                verdict = judge_outside_policy(resources[0].policy, pod.outside_policy)
            elif (unbound := judge_binding(resources[0].policy, pod.admitted, pod.ports)) is not None:
                verdict = unbound
            elif track.stale:
                verdict = judge_stale(resources[0].policy, time.monotonic() - track.received_at)
            elif track.observation is None:
                return track.verdict
            else:
                verdict = self._memo.judge(track.observation, resources[0].policy, was_verified=track.was_verified,
                                           proxied=track.proxied)
                if verdict.trusts is not None:
                    self._trust(resources[0], verdict.trusts, pod)
            await self.verdicts.apply(pod, track, verdict, resources)
            return verdict

    def _trust(self, record: ResourceRecord, revision: Revision, pod: PodRecord) -> None:
        entry = revision.to_spec(with_definitions=small_enough(revision, self.config.status_definitions_limit))
        entry.update({"trustedAt": now_iso(), "pod": pod.name})
        self.state.memory(record.key).trusted = entry
        record.policy = dataclasses.replace(record.policy, trusted=revision)
        logger.info("%s/%s: trusting interface %s on first use (pod %s).", *record.key,
                    short_digest(revision.aggregate), pod.name)

    def _verdict_reason(self, key: Key) -> Reason | None:
        track = self.state.tracks.get(key)
        return track.verdict.reason if track and track.verdict else None
