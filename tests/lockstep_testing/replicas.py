"""Several operator replicas on the kmock API server: the peering object they share, and a resource
name that a given replica owns (lockstep.operator.replicas.membership's rendezvous hashing)."""

from __future__ import annotations

from typing import Any

import kmock
from lockstep_testing.kmock_support import NAMESPACE

from lockstep.operator.replicas.membership import owner

__all__ = ["PEERING", "declare_peering", "resource_owned_by"]

#: The name of the ClusterKopfPeering the replicas of the tests share (the chart's: the release name).
PEERING = "lockstep"


async def declare_peering(emulator: Any, name: str = PEERING) -> None:
    """Teach kmock the ClusterKopfPeering kind, and create the object ``name`` (the chart creates it)."""
    emulator.resources["kopf.dev/v1/clusterkopfpeerings"] = kmock.ResourceInfo(
        kind="ClusterKopfPeering", singular="clusterkopfpeering", namespaced=False,
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"})
    async with emulator.post("/apis/kopf.dev/v1/clusterkopfpeerings",
                             json={"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                                   "metadata": {"name": name}}) as response:
        assert response.status < 300


def resource_owned_by(priority: int, priorities: list[int], namespace: str = NAMESPACE) -> str:
    """The first of weather-0, weather-1, … whose owner among ``priorities`` is ``priority``."""
    return next(name for name in (f"weather-{index}" for index in range(100))
                if owner(f"{namespace}/{name}", priorities) == priority)
