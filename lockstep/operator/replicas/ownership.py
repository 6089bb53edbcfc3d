"""Which replica writes what: each resource has one owner among the replicas (rendezvous hashing over the
membership, lockstep.operator.peering), and a pod goes with the resource that selects it."""

from __future__ import annotations

from collections.abc import Callable

from lockstep.operator.cache import ClusterCache, PodRecord
from lockstep.operator.state import Key

__all__ = ["Ownership", "owner_key"]


def owner_key(namespace: str, name: str) -> str:
    """A resource's key for choosing its owner."""
    return f"{namespace}/{name}"


class Ownership:
    """This replica's share. ``owns``: whether it owns an ownership key; ``alone``: whether it is the only
    replica (then it owns everything, and no key is computed). Without either, the replica is alone."""

    def __init__(self, cache: ClusterCache, owns: Callable[[str], bool] | None = None,
                 alone: Callable[[], bool] | None = None) -> None:
        self.cache = cache
        self._owns: Callable[[str], bool] = owns or (lambda key: True)
        self._alone: Callable[[], bool] = alone or (lambda: owns is None)

    def alone(self) -> bool:
        return self._alone()

    def owns_resource(self, key: Key) -> bool:
        return self._alone() or self._owns(owner_key(*key))

    def pod_owner_key(self, pod: PodRecord) -> str:
        """A pod goes with the resource that selects it (the first by name when several do: a conflict);
        a pod no resource selects is owned by its own key."""
        resources = self.cache.selecting(pod)
        if resources:
            return owner_key(*min(record.key for record in resources))
        return f"{pod.namespace}/pods/{pod.name}"

    def owns_pod(self, pod: PodRecord) -> bool:
        return self._alone() or self._owns(self.pod_owner_key(pod))

    def owned_resources(self) -> set[Key]:
        return {record.key for record in self.cache.resources() if self.owns_resource(record.key)}
