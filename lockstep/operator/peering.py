"""Leadership among replicas, read from kopf's peering object.

kopf pauses the watches of every replica but the one with the highest priority (each replica
draws a random priority, so two never tie). The report endpoint, the stale timer and the status
writer are not watches, so they ask :class:`Leadership` too: a paused replica answers reports
with 503 (its ``/readyz`` fails, so its Service sends reports to the leader) and writes nothing.
Two replicas therefore never write one pod's condition.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep.operator.kube import KubeApiError, KubeClient

__all__ = ["Leadership", "leads"]

logger = logging.getLogger(__name__)


def leads(peering_status: Mapping[str, Any], priority: int, now: datetime | None = None) -> bool:
    """Whether a replica with ``priority`` leads: no other live peer has a priority as high
    (one peer with the same priority is this replica itself)."""
    now = now or datetime.now(UTC)
    same = 0
    for info in peering_status.values():
        if not isinstance(info, Mapping):
            continue
        try:
            seen = datetime.fromisoformat(str(info.get("lastseen")))
            lifetime = timedelta(seconds=int(info.get("lifetime", 60)))
            peer_priority = int(info.get("priority", 0))
        except (TypeError, ValueError):
            continue
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        if seen + lifetime <= now:
            continue
        if peer_priority > priority:
            return False
        same += peer_priority == priority
    return same <= 1


class Leadership:
    """Standalone (no peering name): always the leader. Otherwise, refreshed by :meth:`refresh`."""

    def __init__(self, client: KubeClient | None, peering_name: str | None, priority: int,
                 namespace: str | None) -> None:
        self._client = client
        self._name = peering_name
        self._priority = priority
        self._namespace = namespace
        self._leader = peering_name is None

    def __call__(self) -> bool:
        return self._leader

    @property
    def path(self) -> str:
        if self._namespace:
            return f"/apis/kopf.dev/v1/namespaces/{self._namespace}/kopfpeerings/{self._name}"
        return f"/apis/kopf.dev/v1/clusterkopfpeerings/{self._name}"

    async def refresh(self) -> bool:
        """Read the peering object; returns True when leadership was just gained."""
        if self._name is None or self._client is None:
            return False
        try:
            body = await self._client.get(self.path)
        except (KubeApiError, OSError) as error:
            logger.warning("Cannot read the peering object %s: %s", self.path, error)
            return False
        was = self._leader
        self._leader = leads(body.get("status") or {}, self._priority)
        if was != self._leader:
            logger.info("This replica %s.", "now leads" if self._leader else "stands by")
        return self._leader and not was
