"""Kubernetes Events on pods and resources, for transitions only (never once per probe)."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lockstep.operator.kube import KubeApiError, KubeClient

from lockstep.core.names import API_VERSION, KIND

__all__ = ["EventPoster", "build_event", "event_namespace", "pod_ref", "resource_ref"]

logger = logging.getLogger(__name__)
COMPONENT = "lockstep-operator"
#: Budget of the Events that may be skipped (a pod's own Event for a verdict change): at most
#: POD_EVENT_RATE a second, POD_EVENT_BURST at once. A fleet rollout changes every pod's verdict at the
#: same moment; past the budget a change is told by the pod's condition and by its resource's Event,
#: which names and counts the pods, so the API server's work per verdict change stays one pods/status
#: write (issue 18).
POD_EVENT_RATE = 5.0
POD_EVENT_BURST = 50
#: Where Events about cluster-scoped objects live (as kubectl and client-go's recorder put them).
CLUSTER_EVENT_NAMESPACE = "default"
#: The cluster-scoped kinds Lockstep posts Events about. Their involvedObject names no namespace: `kubectl
#: describe crd` and `kubectl events --for` find an Event by involvedObject.namespace="", and miss one that
#: claims the namespace it was posted in.
CLUSTER_SCOPED_KINDS = frozenset({"CustomResourceDefinition", "Namespace", "Node"})


def pod_ref(namespace: str, name: str, uid: str) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}


def resource_ref(namespace: str, name: str, uid: str) -> dict[str, str]:
    return {"apiVersion": API_VERSION, "kind": KIND, "namespace": namespace, "name": name, "uid": uid}


def event_namespace(ref: Mapping[str, str]) -> str:
    """The namespace of an Event about ``ref``: its own, or ``default`` for a cluster-scoped object."""
    if ref["kind"] in CLUSTER_SCOPED_KINDS or not ref.get("namespace"):
        return CLUSTER_EVENT_NAMESPACE
    return ref["namespace"]


def build_event(ref: Mapping[str, str], type_: str, reason: str, message: str, count: int = 1) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # An explicit name (as kubectl and client-go do): a generateName POST is not idempotent on retry.
    name = f"{ref['name']}.{secrets.token_hex(8)}"
    involved = dict(ref)
    if ref["kind"] in CLUSTER_SCOPED_KINDS:
        involved.pop("namespace", None)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": event_namespace(ref)},
        "involvedObject": involved, "type": type_, "reason": reason, "message": message[:1024],
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "firstTimestamp": now, "lastTimestamp": now, "count": count,
    }


class EventPoster:
    """Posts Events in the background (a report is answered once its condition is written, not its
    Events); a failure is logged, never raised (an Event is not worth failing a verdict)."""

    def __init__(self, client: KubeClient, *, rate: float | None = None, burst: int | None = None) -> None:
        self._client = client
        self._pending: set[asyncio.Task[None]] = set()
        self._rate = POD_EVENT_RATE if rate is None else rate
        self._burst = float(POD_EVENT_BURST if burst is None else burst)
        self._tokens, self._refilled = self._burst, time.monotonic()
        #: Skippable Events not posted because the budget was spent (logged once per flush by the caller).
        self.skipped = 0

    async def post(self, ref: Mapping[str, str], type_: str, reason: str, message: str, *, count: int = 1,
                   skippable: bool = False) -> bool:
        """Post in the background; a ``skippable`` Event only within the budget. Returns whether it is posted."""
        if skippable and not self._spend():
            self.skipped += 1
            return False
        task = asyncio.create_task(self._post(ref, type_, reason, message, count))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return True

    def _spend(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def drain(self) -> None:
        """Wait for the Events still being posted (at shutdown)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _post(self, ref: Mapping[str, str], type_: str, reason: str, message: str, count: int) -> None:
        event = build_event(ref, type_, reason, message, count)
        try:
            await self._client.create_event(event["metadata"]["namespace"], event)
        except (KubeApiError, OSError) as error:
            logger.warning("Cannot post Event %s on %s %s: %s", reason, ref["kind"], ref["name"], error)
