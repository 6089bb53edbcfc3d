"""Leadership among replicas, read from kopf's peering object.

kopf pauses the watches of every replica but the one with the highest priority (each replica
draws a random priority, so two never tie). The stale timer and the status writer are not watches,
so they ask :class:`Leadership` too, and only the leader judges and writes: two replicas never write
one pod's condition.

Each replica publishes where its report endpoint is (``LOCKSTEP_POD_IP``) in an annotation of the
peering object, one key per priority (``report-endpoint.lockstep.dev/<priority>``: a merge patch of
one key never loses another replica's). A standby relays the reports it receives to the leader's
address (lockstep.operator.relay), so a report is served whichever replica the Service picks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep.operator.kube import KubeApiError, KubeClient

__all__ = ["ENDPOINT_ANNOTATION_PREFIX", "Leadership", "leads", "live_priorities"]

logger = logging.getLogger(__name__)


ENDPOINT_ANNOTATION_PREFIX = "report-endpoint.lockstep.dev/"


def live_priorities(peering_status: Mapping[str, Any], now: datetime | None = None) -> list[int]:
    """The priorities of the peers whose entry has not expired."""
    now = now or datetime.now(UTC)
    live = []
    for info in peering_status.values():
        if not isinstance(info, Mapping):
            continue
        try:
            seen = datetime.fromisoformat(str(info.get("lastseen")))
            lifetime = timedelta(seconds=int(info.get("lifetime", 60)))
            priority = int(info.get("priority", 0))
        except (TypeError, ValueError):
            continue
        if (seen if seen.tzinfo else seen.replace(tzinfo=UTC)) + lifetime > now:
            live.append(priority)
    return live


def published_endpoints(annotations: Mapping[str, Any]) -> dict[int, str]:
    """The report endpoints the replicas published, by priority."""
    endpoints = {}
    for key, value in annotations.items():
        suffix = str(key)[len(ENDPOINT_ANNOTATION_PREFIX):] if str(key).startswith(ENDPOINT_ANNOTATION_PREFIX) else ""
        if suffix.isdigit() and isinstance(value, str) and value:
            endpoints[int(suffix)] = value
    return endpoints


def endpoint_host(endpoint: str) -> str:
    """The address part of ``host:port`` or ``[v6]:port``."""
    host = endpoint.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def leads(peering_status: Mapping[str, Any], priority: int, now: datetime | None = None) -> bool:
    """Whether a replica with ``priority`` leads: no other live peer has a priority as high
    (one peer with the same priority is this replica itself)."""
    live = live_priorities(peering_status, now)
    return all(peer <= priority for peer in live) and live.count(priority) <= 1


class Leadership:
    """Standalone (no peering name): always the leader. Otherwise, refreshed by :meth:`refresh`."""

    def __init__(self, client: KubeClient | None, peering_name: str | None, priority: int,
                 namespace: str | None, endpoint: str | None = None) -> None:
        self._client = client
        self._name = peering_name
        self._priority = priority
        self._namespace = namespace
        self._leader = peering_name is None
        #: This replica's report endpoint (``host:port``), published for the others; None: not published.
        self.endpoint = endpoint
        #: The leader's published endpoint while this replica stands by (None: leading, or not published).
        self.leader_endpoint: str | None = None
        #: The addresses of the other live replicas (a report they relay names its sender's address).
        self.peer_hosts: frozenset[str] = frozenset()

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
        status = body.get("status") or {}
        self._leader = leads(status, self._priority)
        await self._follow_endpoints(status, (body.get("metadata") or {}).get("annotations") or {})
        if was != self._leader:
            logger.info("This replica %s.", "now leads" if self._leader else "stands by")
        return self._leader and not was

    async def _follow_endpoints(self, status: Mapping[str, Any], annotations: Mapping[str, Any]) -> None:
        """Learn the leader's and the peers' endpoints; publish this replica's, and (the leader) drop
        those of replicas that are gone."""
        live = live_priorities(status)
        endpoints = published_endpoints(annotations)
        top = max(live, default=None)
        self.leader_endpoint = endpoints.get(top) if top is not None and not self._leader else None
        self.peer_hosts = frozenset(endpoint_host(endpoints[priority]) for priority in live
                                    if priority != self._priority and priority in endpoints)
        changes: dict[str, str | None] = {}
        if self.endpoint and endpoints.get(self._priority) != self.endpoint:
            changes[f"{ENDPOINT_ANNOTATION_PREFIX}{self._priority}"] = self.endpoint
        if self._leader:
            changes.update({f"{ENDPOINT_ANNOTATION_PREFIX}{priority}": None for priority in endpoints
                            if priority not in live and priority != self._priority})
        if changes and self._client is not None:
            try:
                await self._client.merge_patch(self.path, {"metadata": {"annotations": changes}})
            except (KubeApiError, OSError) as error:
                logger.warning("Cannot publish the report endpoint in %s: %s", self.path, error)
