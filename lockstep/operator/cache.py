"""In-memory indexes of pods and MCPServerInterfaces, fed by kopf's watches.

A report is answered from these indexes: the operator never LISTs the cluster per report.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.operator.admission_policy import pod_violations
from lockstep.operator.injection import AdmittedBinding, admitted_binding
from lockstep.operator.judge import Policy

from lockstep.core.conditions import CONDITION_TYPE
from lockstep.core.names import INTERFACE_ANNOTATION
from lockstep.core.replay import ReportStamp, recorded_stamp
from lockstep.core.selection import is_stricter, label_selection_applies, select, selector_matches

__all__ = ["BINDING_ANNOTATION", "ClusterCache", "PodRecord", "ResourceRecord"]

BINDING_ANNOTATION = INTERFACE_ANNOTATION

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
    #: Container ports by name (every container's): how a Service's named targetPort resolves in this pod.
    ports: dict[str, int] = field(default_factory=dict)
    #: What in the pod's spec breaks Lockstep's admission rules (empty: nothing): such a pod is never verified.
    outside_policy: tuple[str, ...] = ()
    #: What its sidecar was injected for (None: it has none): compared with the interface selecting it now.
    admitted: AdmittedBinding | None = None
    #: Set on the pod a condition write returned: the resourceVersion that write was guarded on, so replaced.
    #: A watch event of that version arriving later is the pod as it was before the write (not read again).
    superseded_version: str = ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodRecord:
        admitted = admitted_binding(body)
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
            ports=_named_ports(body.get("spec") or {}),
            outside_policy=_outside_policy(body, admitted),
            admitted=admitted,
        )

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def report_stamp(self) -> ReportStamp | None:
        """The stamp of the report behind the pod's verdict (its annotation, read once per record)."""
        if "_report_stamp" not in self.__dict__:
            self.__dict__["_report_stamp"] = recorded_stamp(self.annotations)
        return self.__dict__["_report_stamp"]

    @property
    def binding(self) -> str | None:
        """The MCPServerInterface the pod's annotation binds it to (the other annotations never change
        which resource selects it)."""
        return self.annotations.get(BINDING_ANNOTATION)

    @property
    def lockstep_condition(self) -> dict[str, Any] | None:
        for condition in self.conditions:
            if condition.get("type") == CONDITION_TYPE:
                return condition
        return None

    @property
    def condition_true(self) -> bool:
        """Whether the pod carries the Lockstep condition True (its readiness gate is open)."""
        condition = self.lockstep_condition
        return condition is not None and str(condition.get("status")) == "True"

    @property
    def other_conditions(self) -> list[dict[str, Any]]:
        return [condition for condition in self.conditions if condition.get("type") != CONDITION_TYPE]


def _outside_policy(body: Mapping[str, Any], admitted: AdmittedBinding | None) -> tuple[str, ...]:
    if not body.get("spec"):
        return ()
    return tuple(pod_violations(body, legacy_sidecar=admitted is not None and admitted.legacy))


def _named_ports(spec: Mapping[str, Any]) -> dict[str, int]:
    ports: dict[str, int] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            if port.get("name") and isinstance(port.get("containerPort"), int):
                ports[str(port["name"])] = int(port["containerPort"])
    return ports


@dataclass
class ResourceRecord:
    """One MCPServerInterface: its parsed policy and the raw status the operator reads back at start."""

    policy: Policy
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.policy.namespace, self.policy.name)


class ClusterCache:
    """Pods and resources by namespace, with label indexes: which resources select a pod, and which
    pods a resource selects, are answered from the index without scanning the namespace."""

    def __init__(self) -> None:
        #: Grows whenever a resource is put or dropped: what a pod's remembered selection is valid for.
        self._generation = 0
        self._pods: dict[str, dict[str, PodRecord]] = {}
        self._resources: dict[str, dict[str, ResourceRecord]] = {}
        self._pods_by_label: dict[str, dict[tuple[str, str], set[str]]] = {}
        self._pods_by_binding: dict[str, dict[str, set[str]]] = {}
        self._resources_by_label: dict[str, dict[tuple[str, str], set[str]]] = {}
        self._resources_by_expression: dict[str, set[str]] = {}

    # pods
    def put_pod(self, pod: PodRecord) -> PodRecord | None:
        previous = self.drop_pod(pod.namespace, pod.name)
        self._pods.setdefault(pod.namespace, {})[pod.name] = pod
        labels = self._pods_by_label.setdefault(pod.namespace, {})
        for pair in pod.labels.items():
            labels.setdefault(pair, set()).add(pod.name)
        bound = pod.annotations.get(BINDING_ANNOTATION)
        if bound:
            self._pods_by_binding.setdefault(pod.namespace, {}).setdefault(bound, set()).add(pod.name)
        return previous

    def drop_pod(self, namespace: str, name: str) -> PodRecord | None:
        pod = self._pods.get(namespace, {}).pop(name, None)
        if pod is None:
            return None
        labels = self._pods_by_label.get(namespace, {})
        for pair in pod.labels.items():
            _discard(labels, pair, name)
        bound = pod.annotations.get(BINDING_ANNOTATION)
        if bound:
            _discard(self._pods_by_binding.get(namespace, {}), bound, name)
        return pod

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        return self._pods.get(namespace, {}).get(name)

    def pods(self) -> Iterator[PodRecord]:
        for bucket in self._pods.values():
            yield from bucket.values()

    # resources
    def put_resource(self, record: ResourceRecord) -> ResourceRecord | None:
        self._generation += 1
        namespace, name = record.key
        previous = self.drop_resource(namespace, name)
        self._resources.setdefault(namespace, {})[name] = record
        match_labels = dict(record.policy.selector.get("matchLabels") or {})
        if match_labels:
            pair = min(match_labels.items())  # every selected pod carries it
            self._resources_by_label.setdefault(namespace, {}).setdefault(pair, set()).add(name)
        else:
            self._resources_by_expression.setdefault(namespace, set()).add(name)
        return previous

    def drop_resource(self, namespace: str, name: str) -> ResourceRecord | None:
        self._generation += 1
        record = self._resources.get(namespace, {}).pop(name, None)
        if record is None:
            return None
        match_labels = dict(record.policy.selector.get("matchLabels") or {})
        if match_labels:
            _discard(self._resources_by_label.get(namespace, {}), min(match_labels.items()), name)
        else:
            self._resources_by_expression.get(namespace, set()).discard(name)
        return record

    def resource(self, namespace: str, name: str) -> ResourceRecord | None:
        return self._resources.get(namespace, {}).get(name)

    def resources(self) -> Iterator[ResourceRecord]:
        for bucket in self._resources.values():
            yield from bucket.values()

    # selection
    def selecting(self, pod: PodRecord) -> list[ResourceRecord]:
        """The resources that select ``pod``: the one its binding annotation names, else every
        resource whose selector matches its labels (two or more is a conflict). Remembered on the pod's
        record until a resource is put or dropped (a report asks several times; a changed pod is a new
        record)."""
        memo = pod.__dict__.get("_selecting")
        if memo is not None and memo[0] == self._generation:
            return list(memo[1])
        selected = self._select(pod)
        pod.__dict__["_selecting"] = (self._generation, tuple(selected))
        return selected

    def _select(self, pod: PodRecord) -> list[ResourceRecord]:
        by_label = self._resources_by_label.get(pod.namespace, {})
        names = set(self._resources_by_expression.get(pod.namespace, ()))
        for pair in pod.labels.items():
            names |= by_label.get(pair, set())
        bucket = self._resources.get(pod.namespace, {})
        bound = pod.annotations.get(BINDING_ANNOTATION)
        if bound:
            names.add(bound)
        # The annotation may not choose a weaker interface than the pod's labels select (annotations can
        # change after admission): a stricter one that selects the pod makes it a conflict (fail closed).
        selection = select(pod.annotations, pod.labels, {name: bucket[name] for name in names if name in bucket},
                           selector=_selector, strictness=_strictness)
        return [bucket[name] for name in selection.selecting]

    def _label_selection_applies(self, pod: PodRecord, record: ResourceRecord | None) -> bool:
        """A pod bound by annotation is still selected by the labels of a stricter interface."""
        bound = pod.annotations.get(BINDING_ANNOTATION)
        if not bound:
            return True
        chosen = self.resource(pod.namespace, bound)
        return record is not None and chosen is not record and label_selection_applies(
            bound, _strictness(chosen) if chosen is not None else None, _strictness(record))

    def selected_pods(self, namespace: str, name: str, selector: Mapping[str, Any] | None = None) -> list[PodRecord]:
        """The pods of ``namespace`` that the resource selects (by its selector or their annotation);
        ``selector`` overrides the cached one (to find the pods an old selector selected)."""
        record = self.resource(namespace, name)
        wanted = selector if selector is not None else (record.policy.selector if record else {})
        bucket = self._pods.get(namespace, {})
        match_labels = dict(wanted.get("matchLabels") or {})
        if match_labels:
            pair = min(match_labels.items())
            candidates: Iterable[str] = self._pods_by_label.get(namespace, {}).get(pair, set())
        else:
            candidates = bucket.keys()
        selected = [bucket[pod] for pod in candidates if pod in bucket
                    and self._label_selection_applies(bucket[pod], record)
                    and selector_matches(wanted, bucket[pod].labels)]
        bound = [bucket[pod] for pod in self._pods_by_binding.get(namespace, {}).get(name, set()) if pod in bucket]
        return sorted(selected + bound, key=lambda pod: pod.name)


def _selector(record: ResourceRecord) -> Mapping[str, Any]:
    return record.policy.selector


def _strictness(record: ResourceRecord) -> tuple[int, int]:
    return record.policy.strictness


def _stricter(record: ResourceRecord, than: ResourceRecord) -> bool:
    return is_stricter(_strictness(record), _strictness(than))


def _discard(index: dict[Any, set[str]], key: Any, name: str) -> None:
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]
