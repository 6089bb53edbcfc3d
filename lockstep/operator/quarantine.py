"""The in-line proxy, on the operator's side (enforcement Isolate and Quarantine): what the pods' proxies
withheld (status, Events, metrics), the approved components each proxy may let through (the answer to its
reports), and the Services that send traffic past the proxy (any port but the proxy's and the sidecar's own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lockstep.operator.events import resource_ref
from lockstep.operator.injection import SIDECAR_PORT_NAME
from lockstep.operator.judge import short_digest
from lockstep.operator.state import Key, ResourceMemory, State
from lockstep.operator.status import now_iso

from lockstep.core.names import PROXY_PORT_NAME
from lockstep.core.report import ProxyReport
from lockstep.core.spec import PROXIED_ENFORCEMENTS
from lockstep.core.wire import ApprovedComponents

if TYPE_CHECKING:
    from lockstep.operator.cache import ClusterCache, PodRecord, ResourceRecord
    from lockstep.operator.judge import Policy
    from lockstep.operator.events import EventPoster
    from lockstep.operator.metrics import Metrics

__all__ = ["WITHHELD_KEPT", "QuarantineBook", "bypassing_ports", "service_entry"]

#: Withheld components remembered per resource (status lists the newest WITHHELD_LISTED).
WITHHELD_KEPT = 50


def _withheld_key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (str(entry.get("component")), str(entry.get("digest")), str(entry.get("action")),
            str(entry.get("client")))


class QuarantineBook:
    def __init__(self, state: State, cache: ClusterCache, events: EventPoster, metrics: Metrics) -> None:
        self.state = state
        self.cache = cache
        self.events = events
        self.metrics = metrics
        #: Services by (namespace, name): their selector and target ports (numbers or names, as text).
        self.services: dict[Key, tuple[dict[str, str], tuple[str, ...]]] = {}

    async def record_withheld(self, pod: PodRecord, proxy: ProxyReport) -> None:
        """Status, Events and metrics for what a pod's proxy withheld since its last report."""
        for record in self.cache.selecting(pod):
            policy = record.policy
            memory = self.state.memory(record.key)
            known = {_withheld_key(entry): entry for entry in memory.withheld}
            for item in proxy.withheld:
                kind = item.component.partition("/")[0]
                self.metrics.count_withheld(policy.namespace, policy.name, kind, item.reason, item.action,
                                            item.client, item.count)
                key = (item.component, item.digest, item.action, item.client)
                entry = known.pop(key, None)
                if entry is None:
                    await self.events.post(
                        resource_ref(policy.namespace, policy.name, policy.uid), "Warning", "ComponentWithheld",
                        f"pod {pod.name}: {item.component} {item.action} ({item.reason}, "
                        f"{short_digest(item.digest) if item.digest else 'no digest'}) for client {item.client}")
                    entry = {**item.to_dict(), "count": 0}
                entry.update(count=int(entry["count"]) + item.count, pod=pod.name, lastSeen=now_iso())
                memory.withheld = [entry, *(e for e in memory.withheld if _withheld_key(e) != key)][:WITHHELD_KEPT]
            self.state.dirty.add(record.key)

    def approved_for(self, pod: PodRecord) -> ApprovedComponents | None:
        """What the proxy of ``pod`` may let through: every approved component digest, and the ignore rules;
        None when none or several resources select the pod (the proxy keeps withholding everything)."""
        resources = self.cache.selecting(pod)
        if len(resources) != 1:
            return None
        policy = resources[0].policy
        state = self.state.resource(resources[0].key)
        cached = state.approved_answer
        if cached is None or cached[0] != policy.judging_key:  # built once per change of what is approved
            cached = state.approved_answer = (
                policy.judging_key, ApprovedComponents.of(policy.effective_approved, policy.ignore))
        return cached[1]

    async def on_service(self, event_type: str, body: Mapping[str, Any]) -> None:
        """Keep the Services: in enforcement Isolate and Quarantine, one that selects the pods on any other port than
        the proxy's is reported."""
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if event_type == "DELETED":
            self.services.pop(key, None)
        else:
            self.services[key] = service_entry(body)
        self.state.dirty.update(record.key for record in self.cache.resources()
                                if record.key[0] == key[0] and record.policy.enforcement in PROXIED_ENFORCEMENTS)

    async def check_bypassing(self, record: ResourceRecord, memory: ResourceMemory) -> None:
        """In enforcement Isolate and Quarantine: an Event for each Service port that newly bypasses the proxy, and
        the metric (status lists them: lockstep.operator.status)."""
        policy = record.policy
        if policy.enforcement not in PROXIED_ENFORCEMENTS:
            return
        bypassing = self._bypassing(record)
        for service in sorted(set(bypassing) - set(memory.bypassing)):
            await self.events.post(resource_ref(policy.namespace, policy.name, policy.uid), "Warning",
                                   "ServiceBypassesProxy",
                                   f"Service port {service} selects pods of this interface on another port than the "
                                   f"in-line proxy's: target the port {PROXY_PORT_NAME} ({policy.proxy_port}) instead")
        memory.bypassing = bypassing
        self.metrics.proxy_bypassing.labels(policy.namespace, policy.name).set(len(bypassing))

    def _bypassing(self, record: ResourceRecord) -> list[str]:
        """``service:targetPort`` for every port of a Service selecting the resource's pods that is not the in-line
        proxy's (``lockstep-mcp`` by name, or its number) nor the sidecar's own (``lockstep-http``, its /metrics).
        Nothing else in a guarded pod may answer peers (ServerExposed), so any other port reaches either the MCP
        server past the proxy or something that should not be there; there is no exception to ask for."""
        return bypassing_ports(record.policy, self.cache.selected_pods(*record.key), self.services)


def service_entry(body: Mapping[str, Any]) -> tuple[dict[str, str], tuple[str, ...]]:
    """A Service's selector and target ports (numbers or names, as text; an absent targetPort is the port)."""
    spec = body.get("spec") or {}
    return (dict(spec.get("selector") or {}),
            tuple(str(port.get("targetPort", port.get("port"))) for port in spec.get("ports") or []))


def bypassing_ports(policy: Policy, pods: Sequence[PodRecord],
                    services: Mapping[Key, tuple[dict[str, str], tuple[str, ...]]]) -> list[str]:
    """``service:targetPort`` of every port of ``services`` (by namespace and name) that selects one of ``pods`` (the
    resource's) on another port than the proxy's or the sidecar's own; [] outside Isolate and Quarantine."""
    if policy.enforcement not in PROXIED_ENFORCEMENTS:
        return []
    found = []
    for (namespace, name), (selector, targets) in sorted(services.items()):
        if namespace != policy.namespace or not selector:
            continue
        selected = [pod for pod in pods if all(pod.labels.get(k) == v for k, v in selector.items())]
        if selected:
            found += [f"{name}:{target}" for target in targets
                      if not _through_sidecar(target, policy.proxy_port, selected)]
    return found


def _through_sidecar(target: str, proxy_port: int, pods: list[PodRecord]) -> bool:
    """Whether a Service's ``target`` port (a number or a container port's name) is the proxy's or, in every one of
    ``pods``, the sidecar's own port."""
    if target in (PROXY_PORT_NAME, SIDECAR_PORT_NAME) or target == str(proxy_port):
        return True
    return target.isdigit() and all(pod.ports.get(SIDECAR_PORT_NAME) == int(target) for pod in pods)
