"""The replicas of one release, and which of them owns each MCPServerInterface.

Every replica watches everything and serves reports; each MCPServerInterface, with the pods it
selects, is owned by exactly one live replica, chosen by rendezvous hashing of the resource's
namespace/name over the live replicas' priorities (each replica draws a random one). The owner judges
those pods, writes their conditions, the resource's status and Events, and runs their stale check; a
replica that gets a report for a pod it does not own relays it to the owner (lockstep.operator.replicas.relay).
When a replica joins or goes, only the resources whose owner changed move, and the new owner rebuilds
their verdicts from the cluster, as at a start.

Membership lives in the peering object of the chart (ClusterKopfPeering, or KopfPeering per namespace),
in kopf's own format: each replica writes its entry ``status.replica-<priority>`` = {priority,
lastseen, lifetime, endpoint} every HEARTBEAT seconds (a merge patch of one key never loses another
replica's); an entry older than its lifetime is a replica that is gone, and is removed by the next
replica that sees it. kopf itself runs standalone: it would pause the watches of all but one replica.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep.operator.config import OperatorConfig
from lockstep.operator.kube import KubeApiError, KubeClient

from lockstep.core.wire import AddressError, ReplicaAddress

__all__ = ["HEARTBEAT", "LIFETIME", "Member", "Membership", "live_members", "owner"]

logger = logging.getLogger(__name__)

#: How often a replica renews its entry, and how long an entry stands without renewal: a killed
#: replica's resources move this long after its last renewal. The defaults of OperatorConfig's
#: peering_heartbeat and peering_lifetime, which the replicas use (tests set them short).
HEARTBEAT = OperatorConfig.peering_heartbeat
LIFETIME = OperatorConfig.peering_lifetime
ENTRY_PREFIX = "replica-"


@dataclass(frozen=True)
class Member:
    priority: int
    endpoint: ReplicaAddress | None  # where it takes reports (None when it publishes none)


#: How far in the future an entry's lastseen may be (clock differences between nodes).
CLOCK_SKEW = timedelta(seconds=30)


def live_members(peering_status: Mapping[str, Any], now: datetime | None = None,
                 max_lifetime: int = LIFETIME) -> list[Member]:
    """The replicas whose entry has not expired. Only Lockstep's entries count (``replica-<priority>``,
    the key naming the entry's own priority), each with at most ``max_lifetime`` seconds (the replicas'
    own lifetime, LIFETIME by default) and a lastseen not in
    the future: an entry written by anyone else (kopf's own, or a forged one with a lifetime of years)
    never becomes an owner for longer than a real replica's entry would. Malformed entries are skipped."""
    now = now or datetime.now(UTC)
    members = []
    for key, info in peering_status.items():
        try:
            member = _member(key, info, now, max_lifetime)
        except (TypeError, ValueError, OverflowError, RecursionError):
            continue
        if member is not None:
            members.append(member)
    return sorted(members, key=lambda member: member.priority)


def _member(key: Any, info: Any, now: datetime, max_lifetime: int = LIFETIME) -> Member | None:
    if not isinstance(key, str) or not key.startswith(ENTRY_PREFIX) or not isinstance(info, Mapping):
        return None
    priority = info.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or key != f"{ENTRY_PREFIX}{priority}":
        return None
    seen = datetime.fromisoformat(str(info.get("lastseen")))
    seen = seen if seen.tzinfo else seen.replace(tzinfo=UTC)
    lifetime = timedelta(seconds=min(max_lifetime, max(0, int(info.get("lifetime", max_lifetime)))))
    if seen > now + CLOCK_SKEW or seen + lifetime <= now:
        return None
    endpoint = info.get("endpoint")
    try:
        address = ReplicaAddress.parse(endpoint) if endpoint else None
    except AddressError:
        address = None  # a member that publishes no usable address: its reports answer 503 (the sidecar retries)
    return Member(priority, address)


def owner(key: str, priorities: list[int]) -> int | None:
    """The priority of the replica that owns ``key`` (rendezvous hashing: a replica that joins or
    goes moves only the keys it wins or held)."""
    return max(priorities, key=lambda priority: hashlib.sha256(f"{priority}/{key}".encode()).digest(),
               default=None)


class Membership:
    """Standalone (no peering name): the only replica, owning everything. Otherwise refreshed by
    :meth:`refresh`, which also renews this replica's entry."""

    def __init__(self, client: KubeClient | None, peering_name: str | None, priority: int,
                 namespace: str | None, endpoint: ReplicaAddress | None = None, lifetime: int = LIFETIME) -> None:
        self._client = client
        #: How long this replica's entry stands without renewal (and the most any entry is believed).
        self.lifetime = lifetime
        self._name = peering_name
        self.priority = priority
        self._namespace = namespace
        #: This replica's report endpoint, published for the others (None: not published).
        self.endpoint = endpoint
        self.members: list[Member] = [Member(priority, endpoint)]

    @property
    def path(self) -> str:
        if self._namespace:
            return f"/apis/kopf.dev/v1/namespaces/{self._namespace}/kopfpeerings/{self._name}"
        return f"/apis/kopf.dev/v1/clusterkopfpeerings/{self._name}"

    @property
    def peer_hosts(self) -> frozenset[str]:
        """The addresses of the other live replicas (a report they relay names its sender's address)."""
        return frozenset(member.endpoint.host for member in self.members
                         if member.priority != self.priority and member.endpoint is not None)

    def alone(self) -> bool:
        """The only live replica: it owns every key."""
        return len(self.members) == 1

    def owns(self, key: str) -> bool:
        return owner(key, [member.priority for member in self.members]) == self.priority

    def owner_endpoint(self, key: str) -> ReplicaAddress | None:
        """Where the owner of ``key`` takes reports (None: this replica owns it, or the owner publishes none)."""
        chosen = owner(key, [member.priority for member in self.members])
        if chosen is None or chosen == self.priority:
            return None
        return next((member.endpoint for member in self.members if member.priority == chosen), None)

    async def refresh(self) -> bool:
        """Renew this replica's entry and read the others'; returns whether the live replicas changed."""
        if self._name is None or self._client is None:
            return False
        now = datetime.now(UTC)
        mine = {"priority": self.priority, "lifetime": self.lifetime,
                "endpoint": str(self.endpoint) if self.endpoint is not None else "",
                "lastseen": now.isoformat()}
        try:
            body = await self._client.merge_patch(self.path, {"status": {f"{ENTRY_PREFIX}{self.priority}": mine}})
        except (KubeApiError, OSError) as error:
            logger.warning("Cannot renew this replica's entry in %s: %s", self.path, error)
            return False
        status = body.get("status") or {}
        members = live_members(status, now, self.lifetime)
        if all(member.priority != self.priority for member in members):
            members = sorted([*members, Member(self.priority, self.endpoint)], key=lambda member: member.priority)
        live = {f"{ENTRY_PREFIX}{member.priority}" for member in members}
        gone = [key for key in status if key.startswith(ENTRY_PREFIX) and key not in live]
        if gone:
            try:
                await self._client.merge_patch(self.path, {"status": {key: None for key in gone}})
            except (KubeApiError, OSError) as error:
                logger.warning("Cannot remove the entries of gone replicas from %s: %s", self.path, error)
        changed = [member.priority for member in members] != [member.priority for member in self.members]
        if changed:
            logger.info("Replicas now: %s (this one: %s).",
                        ", ".join(str(member.priority) for member in members), self.priority)
        self.members = members
        return changed

    async def leave(self) -> None:
        """Remove this replica's entry (a clean stop): its resources move at once, not after LIFETIME."""
        if self._name is None or self._client is None:
            return
        try:
            await self._client.merge_patch(self.path, {"status": {f"{ENTRY_PREFIX}{self.priority}": None}})
        except (KubeApiError, OSError) as error:
            logger.warning("Cannot remove this replica's entry from %s: %s", self.path, error)
