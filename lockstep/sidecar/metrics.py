"""The sidecar's Prometheus metrics (names fixed in ``docs/architecture.md``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lockstep.core import ComponentKind, InterfaceDigest
from lockstep.core.digest import DIGEST_PREFIX

__all__ = ["SidecarMetrics"]


class SidecarMetrics:
    """One registry per sidecar, so that several can live in one process (tests, benches)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.probes = Counter("lockstep_sidecar_probes", "Probes of the MCP server, by result.",
                              ["result"], registry=self.registry)
        self.probe_duration = Histogram(
            "lockstep_sidecar_probe_duration_seconds", "Time to read the whole interface.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=self.registry)
        self.last_success = Gauge("lockstep_sidecar_last_success_timestamp_seconds",
                                  "Unix time of the last probe that read a valid interface.",
                                  registry=self.registry)
        self.reports = Counter("lockstep_sidecar_reports", "Reports sent to the operator, by result.",
                               ["result"], registry=self.registry)
        self.direct_reports = Counter(
            "lockstep_sidecar_direct_reports",
            "Reports sent straight to the operator replica the last answer named (reportTo), not through the "
            "Service, by result: answered (any status), or unreachable (then sent through the Service).",
            ["result"], registry=self.registry)
        self.list_changed = Counter("lockstep_sidecar_list_changed",
                                    "list_changed notifications received from the MCP server.",
                                    registry=self.registry)
        self.floods = Counter("lockstep_sidecar_list_changed_floods",
                              "Sessions closed because the server sent more list_changed notifications than "
                              "the flood limit (the sidecar reconnects after a backoff).", registry=self.registry)
        self.components = Gauge("lockstep_sidecar_interface_components",
                                "Components of the last interface read, by kind.", ["kind"],
                                registry=self.registry)
        self.digest = Gauge("lockstep_sidecar_interface_digest",
                            "The first 52 bits of the aggregate digest, as a number.", registry=self.registry)
        for result in ("ok", "unreachable", "invalid"):
            self.probes.labels(result)
        for result in ("accepted", "rejected", "failed"):
            self.reports.labels(result)

    def observe_interface(self, digest: InterfaceDigest) -> None:
        for kind in ComponentKind:
            count = sum(1 for component in digest.components if component.kind == kind)
            self.components.labels(kind.value).set(count)
        self.digest.set(int(digest.digest.removeprefix(DIGEST_PREFIX)[:13], 16))
