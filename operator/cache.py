"""In-memory indexes of pods and MCPServerInterfaces, fed by kopf's watches.

A report is answered from these indexes: the operator never LISTs the cluster per report.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.operator.injection import selector_matches
from lockstep.operator.judge import CONDITION_TYPE, Policy

__all__ = ["BINDING_ANNOTATION", "ClusterCache", "PodRecord", "ResourceRecord"]

BINDING_ANNOTATION = "lockstep.dev/interface"

Key = tuple[str, str]


@dataclass
class PodRecord:
    """The few fields of a pod that the operator uses."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    conditions: list[dict[str, Any]]
    resource_version: str = ""
    deleting: bool = False

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodRecord:
        metadata = body.get("metadata") or {}
        status = body.get("status") or {}
        return cls(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid") or ""),
            labels=dict(metadata.get("labels") or {}),
            annotations=dict(metadata.get("annotations") or {}),
            conditions=[dict(condition) for condition in status.get("conditions") or []],
            resource_version=str(metadata.get("resourceVersion") or ""),
            deleting=bool(metadata.get("deletionTimestamp")),
        )

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def lockstep_condition(self) -> dict[str, Any] | None:
        for condition in self.conditions:
            if condition.get("type") == CONDITION_TYPE:
                return condition
        return None

    @property
    def other_conditions(self) -> list[dict[str, Any]]:
        return [condition for condition in self.conditions if condition.get("type") != CONDITION_TYPE]


@dataclass
class ResourceRecord:
    """One MCPServerInterface: its parsed policy and the raw status the operator reads back at start."""

    policy: Policy
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.policy.namespace, self.policy.name)


class ClusterCache:
    """Pods and resources by namespace; answers "which resources select this pod" without the API."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, PodRecord]] = {}
        self._resources: dict[str, dict[str, ResourceRecord]] = {}

    # pods
    def put_pod(self, pod: PodRecord) -> PodRecord | None:
        bucket = self._pods.setdefault(pod.namespace, {})
        previous = bucket.get(pod.name)
        bucket[pod.name] = pod
        return previous

    def drop_pod(self, namespace: str, name: str) -> PodRecord | None:
        return self._pods.get(namespace, {}).pop(name, None)

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        return self._pods.get(namespace, {}).get(name)

    def pods(self) -> Iterator[PodRecord]:
        for bucket in self._pods.values():
            yield from bucket.values()

    # resources
    def put_resource(self, record: ResourceRecord) -> ResourceRecord | None:
        bucket = self._resources.setdefault(record.policy.namespace, {})
        previous = bucket.get(record.policy.name)
        bucket[record.policy.name] = record
        return previous

    def drop_resource(self, namespace: str, name: str) -> ResourceRecord | None:
        return self._resources.get(namespace, {}).pop(name, None)

    def resource(self, namespace: str, name: str) -> ResourceRecord | None:
        return self._resources.get(namespace, {}).get(name)

    def resources(self) -> Iterator[ResourceRecord]:
        for bucket in self._resources.values():
            yield from bucket.values()

    # selection
    def selecting(self, pod: PodRecord) -> list[ResourceRecord]:
        """The resources that select ``pod``: the one its binding annotation names, else every
        resource whose selector matches its labels (two or more is a conflict)."""
        bound = pod.annotations.get(BINDING_ANNOTATION)
        if bound:
            record = self.resource(pod.namespace, bound)
            return [record] if record else []
        return [record for record in self._resources.get(pod.namespace, {}).values()
                if selector_matches(record.policy.selector, pod.labels)]

    def selected_pods(self, namespace: str, name: str, selector: Mapping[str, Any] | None = None) -> list[PodRecord]:
        """The pods of ``namespace`` that the resource selects (by its selector or their annotation);
        ``selector`` overrides the cached one (to find the pods an old selector selected)."""
        record = self.resource(namespace, name)
        wanted = selector if selector is not None else (record.policy.selector if record else {})
        return [pod for pod in self._pods.get(namespace, {}).values()
                if pod.annotations.get(BINDING_ANNOTATION) == name
                or (not pod.annotations.get(BINDING_ANNOTATION) and selector_matches(wanted, pod.labels))]
