"""The reconciler: keeps pods' conditions and resources' status in line with the verdicts.

It is fed by kopf's watch events (pods, MCPServerInterfaces), by accepted reports and by the
stale timer. Everything it needs survives a restart in the cluster itself: at start it lists
the resources and pods once and rebuilds the last verdicts from the pods' conditions and the
resources' status, so that nothing flips.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
from lockstep.operator.config import OperatorConfig
from lockstep.operator.events import EventPoster, pod_ref, resource_ref
from lockstep.operator.freshness import OperatorClock
from lockstep.operator.injection import PROXY_PORT_NAME
from lockstep.operator.judge import (
    CONDITION_TYPE,
    Enforcement,
    PodState,
    Policy,
    Reason,
    Verdict,
    judge,
    judge_conflict,
    judge_stale,
    short_digest,
)
from lockstep.operator.kube import KubeApiError, KubeClient
from lockstep.operator.metrics import Metrics
from lockstep.operator.observed_maps import ObservedMaps
from lockstep.operator.outage import ApiUnavailable
from lockstep.operator.status import PodTrack, ResourceMemory, build_status, finding_counts, now_iso

from lockstep.core import Interface
from lockstep.core.digest import ComponentDigest, InterfaceDigest
from lockstep.core.errors import LockstepError
from lockstep.core.report import FailureReason, Observation, ProxyReport
from lockstep.core.revision import Revision

__all__ = ["DefinitionsRequired", "Reconciler"]

logger = logging.getLogger(__name__)
Key = tuple[str, str]
WRITE_ATTEMPTS = 4
VERDICT_CACHE_SIZE = 4096
#: A resource gets at most one Event per verdict reason in this many seconds: the first change at once,
#: the changes after it in one Event at the end of the window, with their count (a fleet rollout
#: posts one Event per resource, not one per pod).
RESOURCE_EVENT_WINDOW = 10.0
#: Pods named in an aggregated Event's message.
EVENT_PODS_NAMED = 5
#: Definitions kept per resource for digest-only reports, by aggregate digest (the most recently used).
HELD_PER_RESOURCE = 32


class DefinitionsRequired(Exception):
    """A digest-only report the operator cannot take: it holds no definitions for the digest (a restart,
    another replica), or taking it would make the pod's condition True (only a full report may do that).
    The sidecar sends the report again at once, with its definitions."""
_FAILURE_REASONS = {Reason.SERVER_UNREACHABLE: FailureReason.SERVER_UNREACHABLE,
                    Reason.INTERFACE_INVALID: FailureReason.INTERFACE_INVALID}


class Reconciler:
    def __init__(self, config: OperatorConfig, client: KubeClient, metrics: Metrics, events: EventPoster,
                 is_leader: Callable[[], bool] = lambda: True, clock: OperatorClock | None = None) -> None:
        self.config = config
        #: The operator's own progress: a pod's silence never includes a pause of the operator.
        self.clock = clock or OperatorClock()
        #: Pods whose verdict could not be written (the API server was away): written when it is back.
        self.unwritten: set[Key] = set()
        self.client = client
        self.metrics = metrics
        self.events = events
        self.is_leader = is_leader
        self.cache = ClusterCache()
        self.tracks: dict[Key, PodTrack] = {}
        self.memory: dict[Key, ResourceMemory] = {}
        #: The approved components each resource's proxies are sent, with the judging key they were built for.
        self._approved_answers: dict[Key, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        #: Services by (namespace, name): their selector and target ports (numbers or names, as text).
        self.services: dict[Key, tuple[dict[str, str], tuple[str, ...]]] = {}
        self.synced = asyncio.Event()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._dirty: set[Key] = set()
        self._written: dict[Key, dict[str, Any]] = {}
        self._verdicts: dict[tuple[Any, ...], Verdict] = {}
        #: Per resource: observations with definitions from accepted full reports, by aggregate digest
        #: (digests are content addresses: any pod of the resource may send digests only for them).
        self._held: dict[Key, dict[str, Observation]] = {}
        #: Resource Events: when each resource last got one, and the verdict changes waiting for the
        #: end of its window, by (resource, event type, reason): the pods and the first pod's message.
        self._resource_event_at: dict[Key, float] = {}
        self._children: dict[tuple[str, str, Reason], tuple[Any, Any]] = {}
        self._batched: dict[tuple[Key, str, str], tuple[dict[str, Any], list[str], str]] = {}
        self.observed_maps = ObservedMaps(client, size_limit=config.observed_configmap_size_limit,
                                          count_limit=config.observed_configmap_limit)

    # ------------------------------------------------------------------ start and restart
    async def resync(self) -> None:
        """List the resources and pods once, and rebuild the last verdicts from the cluster."""
        namespaces: Iterable[str | None] = self.config.namespaces or [None]
        for namespace in namespaces:
            for body in await self.client.list_all(self.client.resources_path(namespace)):
                self._put_resource(body)
            for body in await self.client.list_all(self.client.pods_path(namespace)):
                self.cache.put_pod(PodRecord.from_body(body))
        await self.observed_maps.resync(self.config.namespaces or [None])
        for pod in self.cache.pods():
            self._restore_track(pod)
        self._dirty.update(record.key for record in self.cache.resources())
        self.synced.set()
        logger.info("Synced %d resources and %d pods; restored %d verdicts.",
                    sum(1 for _ in self.cache.resources()), sum(1 for _ in self.cache.pods()), len(self.tracks))

    def _restore_track(self, pod: PodRecord) -> None:
        condition = pod.lockstep_condition
        resources = self.cache.selecting(pod)
        if condition is None or pod.key in self.tracks or len(resources) != 1:
            return
        try:
            reason = Reason(condition.get("reason"))
        except ValueError:
            return
        status = resources[0].status
        entry = next((item for item in status.get("observed") or [] if pod.name in (item.get("pods") or [])), None)
        observation, revision = _rebuild_observation(reason, condition, entry)
        state = {Reason.AUDIT: PodState.AUDIT, Reason.QUARANTINED: PodState.QUARANTINED}.get(reason) \
            or _state_of(reason)
        verdict = Verdict(str(condition.get("status")), reason, str(condition.get("message") or ""), state,
                          revision, (entry or {}).get("closestApproved") or (revision.aggregate if revision else None),
                          tuple((entry or {}).get("findings") or ()))
        self.tracks[pod.key] = PodTrack(
            uid=pod.uid, observation=observation, received_at=time.monotonic(), verdict=verdict,
            was_verified=reason in (Reason.VERIFIED, Reason.INTERFACE_CHANGED),
            stale=reason is Reason.REPORT_STALE, written=verdict.condition, proxied=reason is Reason.QUARANTINED)

    # ------------------------------------------------------------------ watch events
    async def on_resource(self, event_type: str, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        if event_type == "DELETED":
            previous = self.cache.drop_resource(namespace, name)
            self.memory.pop((namespace, name), None)
            self._approved_answers.pop((namespace, name), None)
            self._held.pop((namespace, name), None)
            self._resource_event_at.pop((namespace, name), None)
            for child in [child for child in self._children if child[:2] == (namespace, name)]:
                del self._children[child]
            for batch in [batch for batch in self._batched if batch[0] == (namespace, name)]:
                del self._batched[batch]
            self._written.pop((namespace, name), None)
            self.observed_maps.forget((namespace, name))
            self.metrics.forget_resource(namespace, name)
            if previous and self.synced.is_set():
                await self._judge_all(self.cache.selected_pods(namespace, name, previous.policy.selector))
            return
        previous, record = self._put_resource(body)
        self._dirty.add(record.key)
        if not self.synced.is_set():
            return
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

    def _put_resource(self, body: Mapping[str, Any]) -> tuple[ResourceRecord | None, ResourceRecord]:
        policy = Policy.from_resource(body)
        key = (policy.namespace, policy.name)
        status = dict(body.get("status") or {})
        memory = self.memory.get(key)
        if memory is None:
            memory = self.memory[key] = _memory_from_status(status)
        if memory.trusted is not None and policy.trusted is None:
            # The status write that records the trust may not have come back through the watch yet.
            policy = dataclasses.replace(policy, trusted=_trusted_revision(memory.trusted, policy.ignore))
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
        if (previous.labels, previous.annotations) != (record.labels, record.annotations):
            old = {resource.key for resource in self.cache.selecting(previous)}
            self._dirty.update(old | {resource.key for resource in self.cache.selecting(record)})
            await self._judge_pod(record.key)
        elif (record.key not in self.tracks and not record.deleting and self.is_leader()
              and (_condition_of(record) or ("",))[0] == "True"):
            await self._foreign_condition(record)

    async def _foreign_condition(self, pod: PodRecord) -> None:
        """A pod that has not reported to this operator carries ``interface-verified=True``: anyone with
        pods/status rights can write it. With one resource selecting the pod it stands as a restored
        verdict would (a write of the previous leader can arrive after a hand-over): the pod gets
        staleAfter to report, then is ReportStale. With none or several, Lockstep would never have
        written True: it is set False at once."""
        self.tracks[pod.key] = PodTrack(uid=pod.uid, received_at=time.monotonic(), written=_condition_of(pod))
        if len(self.cache.selecting(pod)) == 1:
            logger.warning("Pod %s/%s carries %s=True that this operator did not write: it stands for staleAfter "
                           "unless the pod reports", pod.namespace, pod.name, CONDITION_TYPE)
            return
        logger.warning("Pod %s/%s carries %s=True that Lockstep did not write: setting it False",
                       pod.namespace, pod.name, CONDITION_TYPE)
        await self._judge_pod(pod.key)

    # ------------------------------------------------------------------ reports and timers
    async def accept(self, pod: PodRecord, observation: Observation,
                     proxy: ProxyReport | None = None) -> Verdict | None:
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
        full = dataclasses.replace(held, observed_at=observation.observed_at, view=observation.view)
        verdict = self._judge_once(full, resources[0].policy, bool(track and track.uid == pod.uid and
                                                                   track.was_verified), proxied)
        if verdict.status == "True" and (current is None or current.status != "True"):
            raise DefinitionsRequired("a digest-only report cannot make the pod's condition True")
        return full

    async def _record_withheld(self, pod: PodRecord, proxy: ProxyReport) -> None:
        """Status, Events and metrics for what a pod's proxy withheld since its last report."""
        for record in self.cache.selecting(pod):
            policy = record.policy
            memory = self.memory.setdefault(record.key, ResourceMemory())
            known = {_withheld_key(entry): entry for entry in memory.withheld}
            for item in proxy.withheld:
                kind = item.component.partition("/")[0]
                self.metrics.count_withheld(policy.namespace, policy.name, kind, item.reason, item.action,
                                            item.client, item.count)
                key = (item.component, item.digest, item.action, item.client)
                entry = known.pop(key, None)
                if entry is None:
                    await self.events.post(
                        resource_ref(policy.namespace, policy.name, policy.uid), "Warning", "ComponentWithheld",
                        f"pod {pod.name}: {item.component} {item.action} ({item.reason}, "
                        f"{short_digest(item.digest) if item.digest else 'no digest'}) for client {item.client}")
                    entry = {**item.to_dict(), "count": 0}
                entry.update(count=int(entry["count"]) + item.count, pod=pod.name, lastSeen=now_iso())
                memory.withheld = [entry, *(e for e in memory.withheld if _withheld_key(e) != key)][:WITHHELD_KEPT]
            self._dirty.add(record.key)

    def approved_components(self, pod: PodRecord) -> dict[str, Any] | None:
        """What the proxy of ``pod`` may let through: every approved component digest, and the ignore rules."""
        resources = self.cache.selecting(pod)
        if len(resources) != 1:
            return None  # none or a conflict: the proxy keeps withholding everything
        policy = resources[0].policy
        cached = self._approved_answers.get(resources[0].key)
        if cached is None or cached[0] != policy.judging_key:  # built once per change of what is approved
            components = sorted({(c.kind.value, c.name, c.digest) for revision in policy.effective_approved
                                 for c in revision.digest.components})
            answer = {"ignore": list(policy.ignore), "components": [
                {"kind": kind, "name": name, "digest": digest} for kind, name, digest in components]}
            cached = self._approved_answers[resources[0].key] = (policy.judging_key, answer)
        return cached[1]

    async def on_service(self, event_type: str, body: Mapping[str, Any]) -> None:
        """Keep the Services: in enforcement Quarantine, one that targets a port past the proxy is reported."""
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if event_type == "DELETED":
            self.services.pop(key, None)
        else:
            spec = body.get("spec") or {}
            self.services[key] = (dict(spec.get("selector") or {}),
                                  tuple(str(port.get("targetPort", port.get("port"))) for port in spec.get("ports") or []))
        self._dirty.update(record.key for record in self.cache.resources()
                           if record.key[0] == key[0] and record.policy.enforcement is Enforcement.QUARANTINE)

    def _bypassing(self, record: ResourceRecord) -> list[str]:
        """Services selecting the resource's pods with a target port other than the proxy's."""
        policy = record.policy
        pods = self.cache.selected_pods(*record.key)
        through = {PROXY_PORT_NAME, str(policy.proxy_port)}
        found = []
        for (namespace, name), (selector, targets) in sorted(self.services.items()):
            if namespace != policy.namespace or not selector:
                continue
            if any(all(pod.labels.get(k) == v for k, v in selector.items()) for pod in pods):
                found += [f"{name}:{target}" for target in targets if target not in through]
        return found

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
            if len(resources) == 1 and self.clock.silence(track.received_at, now) > resources[0].policy.stale_after:
                track.stale = True
                try:
                    await self._judge_pod(key)
                except ApiUnavailable:
                    return  # written by retry_unwritten once the API server is back

    async def retry_unwritten(self) -> None:
        """Write the verdicts that waited for the API server; stops at the first that still cannot."""
        for key in list(self.unwritten):
            self.unwritten.discard(key)
            await self._judge_pod(key)

    async def flush_status(self, *, final: bool = False) -> None:
        await self.post_batched_events(everything=final)
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            record = self.cache.resource(*key)
            if record is not None:
                try:
                    await self._write_status(record)
                except ApiUnavailable:
                    self._dirty.add(key)  # the outage is logged once, by lockstep.operator.outage
                except (KubeApiError, OSError) as error:
                    logger.warning("Cannot write the status of %s/%s: %s", *key, error)
                    self._dirty.add(key)

    def selecting(self, pod: PodRecord) -> list[ResourceRecord]:
        return self.cache.selecting(pod)

    # ------------------------------------------------------------------ judging
    async def _judge_all(self, pods: Iterable[PodRecord]) -> None:
        await asyncio.gather(*(self._judge_pod(pod.key) for pod in pods))

    async def _judge_pod(self, key: Key) -> Verdict | None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            pod = self.cache.pod(*key)
            track = self.tracks.get(key)
            if pod is None or track is None:
                return None
            resources = self.cache.selecting(pod)
            if not resources:
                if track.written is not None and track.written[0] == "True":
                    await self._unselected(pod, track)  # its resource is gone: fail closed
                return None
            if len(resources) > 1:
                verdict = judge_conflict([record.policy.name for record in resources])
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

    async def _unselected(self, pod: PodRecord, track: PodTrack) -> None:
        verdict = Verdict("False", Reason.NOT_APPROVED, "no MCPServerInterface selects this pod any more",
                          PodState.PENDING)
        track.verdict, track.observation = verdict, None
        if await self._write_condition(pod.key, verdict):
            track.written = verdict.condition
            await self.events.post(pod_ref(pod.namespace, pod.name, pod.uid), "Warning", verdict.reason.value,
                                   verdict.message)

    def _judge_once(self, observation: Observation, policy: Policy, was_verified: bool,
                    proxied: bool = False) -> Verdict:
        """Judge, reusing the verdict of an identical observation of another pod (same aggregate
        digest, so the same definitions) under the same policy: the diff runs once per revision."""
        if observation.digest is None:
            return judge(observation, policy, was_verified=was_verified, proxied=proxied)
        key = (policy.namespace, policy.name, policy.judging_key, observation.digest.digest,
               observation.definitions is not None, was_verified, proxied)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = judge(observation, policy, was_verified=was_verified, proxied=proxied)
            if verdict.trusts is None:
                self._verdicts[key] = verdict
                if len(self._verdicts) > VERDICT_CACHE_SIZE:
                    del self._verdicts[next(iter(self._verdicts))]
        return verdict

    def _trust(self, record: ResourceRecord, revision: Revision, pod: PodRecord) -> None:
        entry = revision.to_spec(with_definitions=_small(revision, self.config.status_definitions_limit))
        entry.update({"trustedAt": now_iso(), "pod": pod.name})
        self.memory.setdefault(record.key, ResourceMemory()).trusted = entry
        record.policy = dataclasses.replace(record.policy, trusted=revision)
        logger.info("%s/%s: trusting interface %s on first use (pod %s).", *record.key,
                    short_digest(revision.aggregate), pod.name)

    async def _apply(self, pod: PodRecord, track: PodTrack, verdict: Verdict,
                     resources: list[ResourceRecord]) -> None:
        previous = track.verdict
        track.verdict = verdict
        if verdict.reason is Reason.VERIFIED:
            track.was_verified = True
        stamp = now_iso()
        for record in resources:
            memory = self.memory.setdefault(record.key, ResourceMemory())
            memory.last_verification = stamp
            if verdict.revision is not None:
                memory.first_seen.setdefault(verdict.revision.aggregate, stamp)
            verifications, last = self._metric_children(record.policy, verdict.reason)
            verifications.inc()
            last.set(time.time())
            if verdict is not previous:
                # The same verdict object again (an unchanged observation, from the verdict cache): the
                # status would differ only in lastVerificationTime, which alone is never written.
                self._dirty.add(record.key)
        current = _condition_of(pod)
        if track.written is not None and current != track.written and current in track.earlier:
            current = track.written  # a late watch event of an earlier write: the pod carries the last one
        if current == verdict.condition:
            self.unwritten.discard(pod.key)
            return
        try:
            wrote = await self._write_condition(pod.key, verdict)
        except ApiUnavailable:
            # Not written: the pod keeps the condition it carries, and the verdict is judged and written
            # again once the API server is back (retry_unwritten), with its Events.
            track.verdict = previous
            self.unwritten.add(pod.key)
            raise
        self.unwritten.discard(pod.key)
        if not wrote:
            return
        if track.written is not None and track.written != verdict.condition:
            track.earlier = [*track.earlier[-3:], track.written]
        track.written = verdict.condition
        if previous is None or (previous.status, previous.reason) != (verdict.status, verdict.reason):
            await self._announce(pod, verdict, resources)

    def _metric_children(self, policy: Policy, reason: Reason) -> tuple[Any, Any]:
        """The verification counter and timestamp of a resource and reason (labels() looked up once)."""
        key = (policy.namespace, policy.name, reason)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.metrics.verifications.labels(policy.namespace, policy.name, reason.value),
                self.metrics.last_verification.labels(policy.namespace, policy.name))
        return children

    async def _announce(self, pod: PodRecord, verdict: Verdict, resources: list[ResourceRecord]) -> None:
        """An Event on the pod for each of its transitions; on the resource, at most one per reason and
        RESOURCE_EVENT_WINDOW (the rest are counted into one Event at the end of the window)."""
        kind = "Normal" if verdict.status == "True" and verdict.reason is Reason.VERIFIED else "Warning"
        await self.events.post(pod_ref(pod.namespace, pod.name, pod.uid), kind, verdict.reason.value, verdict.message)
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

    async def post_batched_events(self, *, everything: bool = False) -> None:
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

    async def _write_condition(self, key: Key, verdict: Verdict) -> bool:
        """Merge-patch pods/status with the full conditions list (a merge patch replaces lists), guarded
        by the pod's resourceVersion so that a condition written meanwhile by the kubelet is not lost.
        Returns whether it wrote (False: the pod is gone, or already carries the verdict)."""
        for attempt in range(WRITE_ATTEMPTS):
            pod = self.cache.pod(*key)
            if pod is None:
                return False
            if attempt and _condition_of(pod) == verdict.condition:
                return False
            old = pod.lockstep_condition or {}
            since = old.get("lastTransitionTime") if old.get("status") == verdict.status else None
            condition = {"type": CONDITION_TYPE, "status": verdict.status, "reason": verdict.reason.value,
                         "message": verdict.message, "lastProbeTime": None,
                         "lastTransitionTime": since or now_iso()}
            patch: dict[str, Any] = {"status": {"conditions": [*pod.other_conditions, condition]}}
            if pod.resource_version:
                patch["metadata"] = {"resourceVersion": pod.resource_version}
            try:
                body = await self.client.merge_patch(self.client.pod_status_path(*key), patch)
            except KubeApiError as error:
                if error.status == 404:
                    self.cache.drop_pod(*key)
                    return False
                if error.status != 409:
                    raise
                fresh = await self.client.get(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}")
                self.cache.put_pod(PodRecord.from_body(fresh))
                continue
            written = PodRecord.from_body(body) if body and body.get("metadata") else None
            if written is not None and written.uid == pod.uid:
                self.cache.put_pod(written)
            else:
                pod.conditions = [*pod.other_conditions, condition]
            return True
        raise KubeApiError(409, f"pod {key[0]}/{key[1]} kept changing; condition not written")

    def _verdict_reason(self, key: Key) -> Reason | None:
        track = self.tracks.get(key)
        return track.verdict.reason if track and track.verdict else None

    # ------------------------------------------------------------------ status
    async def _write_status(self, record: ResourceRecord) -> None:
        policy = record.policy
        pods = [(pod, self.tracks.get(pod.key)) for pod in self.cache.selected_pods(*record.key)]
        memory = self.memory.setdefault(record.key, ResourceMemory())
        if policy.enforcement is Enforcement.QUARANTINE:
            bypassing = self._bypassing(record)
            for service in sorted(set(bypassing) - set(memory.bypassing)):
                await self.events.post(resource_ref(policy.namespace, policy.name, policy.uid), "Warning",
                                       "ServiceBypassesProxy",
                                       f"Service port {service} sends traffic past the proxy: target the port "
                                       f"{PROXY_PORT_NAME} ({policy.proxy_port}) instead")
            memory.bypassing = bypassing
            self.metrics.proxy_bypassing.labels(policy.namespace, policy.name).set(len(bypassing))
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
        self._written[record.key] = status
        await self.observed_maps.prune(record.key, unwanted)  # only once status no longer points at them


#: Withheld components remembered per resource (status lists the newest WITHHELD_LISTED).
WITHHELD_KEPT = 50


def _withheld_key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (str(entry.get("component")), str(entry.get("digest")), str(entry.get("action")),
            str(entry.get("client")))


def _condition_of(pod: PodRecord) -> tuple[str, str, str] | None:
    condition = pod.lockstep_condition
    if condition is None:
        return None
    return (str(condition.get("status")), str(condition.get("reason")), str(condition.get("message") or ""))


def _same_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Equal but for lastVerificationTime, which alone never causes a write (the metric
    lockstep_last_verification_timestamp_seconds carries the live value)."""
    return all(old.get(key) == value for key, value in new.items() if key != "lastVerificationTime")


def _state_of(reason: Reason) -> PodState:
    return {Reason.VERIFIED: PodState.VERIFIED, Reason.INTERFACE_CHANGED: PodState.DRIFTED,
            Reason.NOT_APPROVED: PodState.DRIFTED, Reason.INTERFACE_INVALID: PodState.INVALID,
            Reason.SERVER_UNREACHABLE: PodState.UNREACHABLE, Reason.REPORT_STALE: PodState.STALE,
            Reason.CONFLICT: PodState.CONFLICT}.get(reason, PodState.AUDIT)


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


def _memory_from_status(status: Mapping[str, Any]) -> ResourceMemory:
    memory = ResourceMemory()
    for entry in status.get("observed") or []:
        if entry.get("digest") and entry.get("firstSeen"):
            memory.first_seen[str(entry["digest"])] = str(entry["firstSeen"])
    if isinstance(status.get("trusted"), Mapping):
        memory.trusted = dict(status["trusted"])
    if status.get("lastVerificationTime"):
        memory.last_verification = str(status["lastVerificationTime"])
    return memory


def _trusted_revision(entry: Mapping[str, Any], ignore: Iterable[str]) -> Revision | None:
    try:
        return Revision.from_spec(entry, ignore=list(ignore))
    except LockstepError:
        return None


def _small(revision: Revision, limit: int) -> bool:
    import json

    return revision.interface is not None and \
        len(json.dumps(revision.interface.to_document(), separators=(",", ":"))) <= limit
