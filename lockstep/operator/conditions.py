"""The pod condition ``lockstep.dev/interface-verified``: a verdict applied to a pod (VerdictApplier:
metrics, the resources' status marked for a write, the condition written, its Events), and the write
itself (ConditionWriter: a merge patch of pods/status guarded by the pod's resourceVersion).
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import TYPE_CHECKING, Any

from lockstep.operator.cache import PodRecord
from lockstep.operator.events import pod_ref
from lockstep.operator.freshness import StaleReport
from lockstep.operator.judge import CONDITION_TYPE, PodState, Reason, Verdict
from lockstep.operator.kube import KubeApiError
from lockstep.operator.outage import ApiUnavailable
from lockstep.operator.state import Key, PodTrack, State
from lockstep.operator.status import now_iso

from lockstep.core.conditions import condition_dict
from lockstep.core.replay import REPORT_STAMP_ANNOTATION, ReportStamp

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache, ResourceRecord
    from lockstep.operator.config import OperatorConfig
    from lockstep.operator.events import EventPoster
    from lockstep.operator.kube import KubeClient
    from lockstep.operator.metrics import Metrics
    from lockstep.operator.verdict_events import VerdictEvents

__all__ = ["WRITE_ATTEMPTS", "ConditionWriter", "VerdictApplier", "VerdictNotWritten", "condition_of"]

logger = logging.getLogger(__name__)

WRITE_ATTEMPTS = 4


class VerdictNotWritten(Exception):
    """A verdict the API server did not take (an error other than an outage): the pod is kept in
    ``unwritten`` and the verdict is written again until it lands or the pod is gone."""


def condition_of(pod: PodRecord) -> tuple[str, str, str] | None:
    """The (status, reason, message) of the Lockstep condition ``pod`` carries."""
    condition = pod.lockstep_condition
    if condition is None:
        return None
    return (str(condition.get("status")), str(condition.get("reason")), str(condition.get("message") or ""))


class ConditionWriter:
    """Writes the Lockstep condition of one pod: a merge patch of pods/status, guarded by the pod's
    resourceVersion, with the stamp of the report behind the verdict."""

    def __init__(self, config: OperatorConfig, client: KubeClient, cache: ClusterCache) -> None:
        self.config = config
        self.client = client
        self.cache = cache

    async def write(self, key: Key, verdict: Verdict, *, stamp: ReportStamp | None = None, uid: str = "") -> bool:
        """Merge-patch pods/status with the full conditions list (a merge patch replaces lists), guarded
        by the pod's resourceVersion so that a condition written meanwhile by the kubelet is not lost.
        ``stamp``: the stamp of the report behind the verdict, written with it into the pod of ``uid``.
        Returns whether it wrote (False: the pod is gone, or already carries the verdict)."""
        stamped = True
        for attempt in range(WRITE_ATTEMPTS):
            pod = self.cache.pod(*key)
            if pod is None:
                return False
            if attempt and condition_of(pod) == verdict.condition:
                return False
            condition = condition_dict(CONDITION_TYPE, verdict.status, verdict.reason.value, verdict.message,
                                       pod.lockstep_condition, now_iso(), lastProbeTime=None)
            # A True carries the stamp of its report, and is not written over a newer one; a False is written
            # whatever the pod records (a stamp someone else put there must never hold a pod Ready).
            metadata = self._stamp_annotation(pod, stamp if pod.uid == uid else None,
                                              check=verdict.status == "True") if stamped else {}
            patch: dict[str, Any] = {"status": {"conditions": [*pod.other_conditions, condition]},
                                     "metadata": metadata}
            if pod.resource_version:
                patch["metadata"]["resourceVersion"] = pod.resource_version
            try:
                body = await self.client.merge_patch(self.client.pod_status_path(*key), patch)
            except KubeApiError as error:
                if error.status == 404:
                    self.cache.drop_pod(*key)
                    return False
                if error.status == 422 and stamped and metadata.get("annotations"):
                    # The pod refuses the annotation (its annotations are over the API server's budget, or
                    # someone wrote a value it cannot merge): the verdict goes without the stamp.
                    stamped = False
                    continue
                if error.status != 409:
                    raise
                fresh = await self.client.get(f"/api/v1/namespaces/{key[0]}/pods/{key[1]}")
                self.cache.put_pod(PodRecord.from_body(fresh))
                continue
            written = PodRecord.from_body(body) if body and body.get("metadata") else None
            if written is not None and written.uid == pod.uid:
                if written.resource_version != pod.resource_version:  # (an API that keeps versions: every write bumps it)
                    written.superseded_version = pod.resource_version
                self.cache.put_pod(written)
            else:
                pod.conditions = [*pod.other_conditions, condition]
            return True
        raise KubeApiError(409, f"pod {key[0]}/{key[1]} kept changing; condition not written")

    def _stamp_annotation(self, pod: PodRecord, stamp: ReportStamp | None, *, check: bool) -> dict[str, Any]:
        """The annotations of the write: ``stamp``, of the report behind the verdict. With ``check`` (a
        True), unless the pod records a newer one (another replica, or the last leader, accepted a later
        report: this verdict is of an older report and is not written)."""
        if stamp is None:
            return {}
        recorded = pod.report_stamp
        if recorded is not None and not recorded.plausible(datetime.datetime.now(datetime.UTC),
                                                            self.config.max_clock_skew):
            recorded = None  # not Lockstep's (lockstep.operator.freshness refuses such reports): overwritten
        if check and recorded is not None and recorded != stamp:
            why = stamp.replays(recorded)
            if why is not None:
                raise StaleReport("Replayed", f"the pod records a newer report than this one: {why}")
        return {"annotations": {REPORT_STAMP_ANNOTATION: stamp.to_annotation()}}


class VerdictApplier:
    """A verdict applied to a pod: the resources' memory and metrics, their status marked for a write
    (at once when the pod was cut), the condition written, the Events of a change."""

    def __init__(self, state: State, writer: ConditionWriter, metrics: Metrics, events: EventPoster,
                 verdict_events: VerdictEvents) -> None:
        self.state = state
        self.writer = writer
        self.metrics = metrics
        self.events = events
        self.verdict_events = verdict_events

    async def apply(self, pod: PodRecord, track: PodTrack, verdict: Verdict,
                    resources: list[ResourceRecord]) -> None:
        previous = track.verdict
        track.verdict = verdict
        if verdict.reason is Reason.VERIFIED:
            track.was_verified = True
        stamp = now_iso()
        for record in resources:
            memory = self.state.memory(record.key)
            memory.last_verification = stamp
            if verdict.revision is not None:
                memory.first_seen.setdefault(verdict.revision.aggregate, stamp)
            verifications, last = self._metric_children(record, verdict.reason)
            verifications.inc()
            last.set(time.time())
            if verdict is not previous:
                # The same verdict object again (an unchanged observation, from the verdict cache): the
                # status would differ only in lastVerificationTime, which alone is never written.
                self.state.dirty.add(record.key)
        if condition_of(pod) == verdict.condition:
            self.state.unwritten.discard(pod.key)
            return
        try:
            wrote = await self.writer.write(pod.key, verdict, stamp=track.stamp, uid=track.uid)
        except StaleReport:
            raise  # a True of a report older than the pod's recorded one: the report is refused, nothing kept
        except Exception as error:
            # Not written: the pod keeps the condition it carries, and the verdict is judged and written
            # again with its Events.
            track.verdict = previous
            raise self._not_written(pod, verdict, error) from error
        self.state.unwritten.discard(pod.key)
        if not wrote:
            return
        track.written = verdict.condition
        if previous is None or (previous.status, previous.reason) != (verdict.status, verdict.reason):
            if verdict.status != "True" or verdict.state is PodState.QUARANTINED:
                # the status must not say Verified about a pod just cut
                self.state.mark_urgent({record.key for record in resources})
            await self.verdict_events.announce(pod, verdict, resources)

    def _metric_children(self, record: ResourceRecord, reason: Reason) -> tuple[Any, Any]:
        """The verification counter and timestamp of a resource and reason (labels() looked up once)."""
        policy = record.policy
        cached = self.state.resource(record.key).metric_children
        children = cached.get(reason)
        if children is None:
            children = cached[reason] = (
                self.metrics.verifications.labels(policy.namespace, policy.name, reason.value),
                self.metrics.last_verification.labels(policy.namespace, policy.name))
        return children

    async def unselected(self, pod: PodRecord, track: PodTrack) -> None:
        verdict = Verdict("False", Reason.NOT_APPROVED, "no MCPServerInterface selects this pod any more",
                          PodState.PENDING)
        track.verdict, track.observation = verdict, None
        try:
            wrote = await self.writer.write(pod.key, verdict, stamp=track.stamp, uid=track.uid)
        except Exception as error:
            raise self._not_written(pod, verdict, error) from error
        self.state.unwritten.discard(pod.key)
        if wrote:
            track.written = verdict.condition
            await self.events.post(pod_ref(pod.namespace, pod.name, pod.uid), "Warning", verdict.reason.value,
                                   verdict.message)

    def _not_written(self, pod: PodRecord, verdict: Verdict, error: Exception) -> Exception:
        """Record a verdict whose write failed, and what to raise: the pod goes to ``unwritten``, written
        again every write_retry_interval (retry_unwritten) until it lands or the pod is gone: fail closed,
        a False that did not land is never forgotten. An outage stays ApiUnavailable (logged once by
        lockstep.operator.outage); any other error becomes VerdictNotWritten."""
        self.state.unwritten.add(pod.key)
        self.metrics.verdict_writes_failed.inc()
        if isinstance(error, ApiUnavailable):
            return error
        logger.warning("Pod %s/%s: the verdict %s/%s was not written (%s); retrying",
                       pod.namespace, pod.name, verdict.status, verdict.reason.value, error)
        return VerdictNotWritten(f"pod {pod.namespace}/{pod.name}: {error}")
