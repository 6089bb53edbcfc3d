"""Kubernetes Events on pods and resources, for transitions only (never once per probe)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lockstep.operator.kube import GROUP, VERSION, KubeApiError, KubeClient

__all__ = ["EventPoster", "pod_ref", "resource_ref"]

logger = logging.getLogger(__name__)
COMPONENT = "lockstep-operator"


def pod_ref(namespace: str, name: str, uid: str) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}


def resource_ref(namespace: str, name: str, uid: str) -> dict[str, str]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MCPServerInterface", "namespace": namespace,
            "name": name, "uid": uid}


def build_event(ref: Mapping[str, str], type_: str, reason: str, message: str, count: int = 1) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # An explicit name (as kubectl and client-go do): a generateName POST is not idempotent on retry.
    name = f"{ref['name']}.{secrets.token_hex(8)}"
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": ref["namespace"]},
        "involvedObject": dict(ref), "type": type_, "reason": reason, "message": message[:1024],
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "firstTimestamp": now, "lastTimestamp": now, "count": count,
    }


class EventPoster:
    """Posts Events in the background (a report is answered once its condition is written, not its
    Events); a failure is logged, never raised (an Event is not worth failing a verdict)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._pending: set[asyncio.Task[None]] = set()

    async def post(self, ref: Mapping[str, str], type_: str, reason: str, message: str, *, count: int = 1) -> None:
        task = asyncio.create_task(self._post(ref, type_, reason, message, count))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for the Events still being posted (at shutdown)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _post(self, ref: Mapping[str, str], type_: str, reason: str, message: str, count: int) -> None:
        try:
            await self._client.create_event(ref["namespace"], build_event(ref, type_, reason, message, count))
        except (KubeApiError, OSError) as error:
            logger.warning("Cannot post Event %s on %s/%s: %s", reason, ref["namespace"], ref["name"], error)
