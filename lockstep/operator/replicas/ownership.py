"""Which replica writes what: each resource has one owner among the replicas (rendezvous hashing over the
membership, lockstep.operator.replicas.membership), and a pod goes with the resource that selects it.

The one place that answers "whose is this pod": the reconciler asks before it writes, the report endpoint
before it judges (``route``: here, at another replica's address, or unknown)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lockstep.operator.cache import ClusterCache, PodRecord
from lockstep.operator.state import Key

from lockstep.core.wire import ReplicaAddress

__all__ = ["LOCAL", "UNKNOWN", "Local", "Ownership", "Remote", "Replicas", "Route", "Unknown", "owner_key"]


def owner_key(namespace: str, name: str) -> str:
    """A resource's key for choosing its owner."""
    return f"{namespace}/{name}"


class Replicas(Protocol):
    """The live replicas, as lockstep.operator.replicas.membership.Membership knows them."""

    endpoint: ReplicaAddress | None

    def alone(self) -> bool: ...

    def owns(self, key: str) -> bool: ...

    def owner_endpoint(self, key: str) -> ReplicaAddress | None: ...


@dataclass(frozen=True)
class Local:
    """This replica owns the pod: it judges and writes."""


@dataclass(frozen=True)
class Remote:
    """Another replica owns the pod, and takes reports at ``address``."""

    address: ReplicaAddress


@dataclass(frozen=True)
class Unknown:
    """Another replica owns the pod and publishes no address (or is not known yet): the sidecar retries."""


Route = Local | Remote | Unknown
LOCAL, UNKNOWN = Local(), Unknown()


class Ownership:
    """This replica's share of the resources and pods. Without ``replicas`` it is the only replica and owns
    everything; with them, whatever rendezvous hashing gives it (everything while it is alone)."""

    def __init__(self, cache: ClusterCache, replicas: Replicas | None = None) -> None:
        self.cache = cache
        self.replicas = replicas

    def alone(self) -> bool:
        return self.replicas is None or self.replicas.alone()

    def owns_resource(self, key: Key) -> bool:
        return self.alone() or self.replicas.owns(owner_key(*key))  # type: ignore[union-attr]

    def pod_owner_key(self, pod: PodRecord) -> str:
        """A pod goes with the resource that selects it (the first by name when several do: a conflict);
        a pod no resource selects is owned by its own key."""
        resources = self.cache.selecting(pod)
        if resources:
            return owner_key(*min(record.key for record in resources))
        return f"{pod.namespace}/pods/{pod.name}"

    def owns_pod(self, pod: PodRecord) -> bool:
        return self.alone() or self.replicas.owns(self.pod_owner_key(pod))  # type: ignore[union-attr]

    def route(self, pod: PodRecord) -> Route:
        """Where a report of ``pod`` is judged."""
        if self.owns_pod(pod):
            return LOCAL
        address = self.replicas.owner_endpoint(self.pod_owner_key(pod))  # type: ignore[union-attr]
        return Remote(address) if address is not None else UNKNOWN

    def own_address(self) -> ReplicaAddress | None:
        """This replica's address, for the sidecars it answers, when there are others to avoid a relay."""
        return None if self.alone() else self.replicas.endpoint  # type: ignore[union-attr]

    def owned_resources(self) -> set[Key]:
        return {record.key for record in self.cache.resources() if self.owns_resource(record.key)}
