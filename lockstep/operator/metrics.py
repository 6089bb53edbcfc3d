"""The operator's Prometheus metrics (names and labels fixed in docs/architecture.md).

Labels are bounded: namespace and resource names, states, reasons; never a pod, uid or digest.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping

from aiohttp import web
from lockstep.operator.judge import PodState
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from lockstep.core.refusals import Refusal

__all__ = ["REJECTION_REASONS", "Metrics", "SidecarVersions"]

#: The ``reason`` labels of ``lockstep_reports_rejected_total``: the counted refusals of lockstep.core.refusals.
REJECTION_REASONS = Refusal.counted_reasons()
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# No ``*_created`` series: one per labelled child of every counter and histogram, they would double the
# lines of a scrape (12,000 at 1,000 resources, 85 ms of the operator's CPU each) for nothing a dashboard
# or alert uses. Process-wide, and the operator's process is its own.
disable_created_metrics()

#: Distinct ``client`` label values per resource in ``lockstep_proxy_withheld_total``.
MAX_CLIENT_LABELS = 10


class Metrics:
    """One registry per operator instance (tests run several operators in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.pods = Gauge("lockstep_pods", "Selected pods by verification state.",
                          ["namespace", "interface", "state"], registry=self.registry)
        self.drift_findings = Gauge("lockstep_drift_findings", "Drift findings against the closest approved "
                                    "revision, over the pods' observed revisions.",
                                    ["namespace", "interface", "component_kind", "change", "severity"],
                                    registry=self.registry)
        self.verifications = Counter("lockstep_verifications_total", "Verdicts reached, by condition reason.",
                                     ["namespace", "interface", "result"], registry=self.registry)
        self.report_duration = Histogram("lockstep_report_duration_seconds",
                                         "Time from a report's arrival to its answer (condition written).",
                                         ["outcome"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.reports_rejected = Counter("lockstep_reports_rejected_total", "Reports refused, by reason.",
                                        ["reason"], registry=self.registry)
        self.last_verification = Gauge("lockstep_last_verification_timestamp_seconds",
                                       "Unix time of the last verdict reached for a resource's pods.",
                                       ["namespace", "interface"], registry=self.registry)
        self.webhook_requests = Counter("lockstep_webhook_requests_total", "Admission requests handled.",
                                        ["webhook", "outcome"], registry=self.registry)
        self.proxy_withheld = Counter(
            "lockstep_proxy_withheld_total",
            "Components the pods' in-line proxies kept from clients (enforcement Quarantine), by component kind, "
            "reason, action and client (clientInfo name; at most 10 per resource, then other).",
            ["namespace", "interface", "component_kind", "reason", "action", "client"], registry=self.registry)
        self.proxy_bypassing = Gauge(
            "lockstep_proxy_bypassing_services",
            "Service ports that select the pods of an enforcement Quarantine resource but target a port other "
            "than the proxy's (lockstep-mcp).", ["namespace", "interface"], registry=self.registry)
        self.approvals_untrusted = Gauge(
            "lockstep_approvals_untrusted",
            "Approved revisions of a resource that no signed approval vouches for under an Enforce MCPApprovalPolicy "
            "(unsigned, altered, expired, rolled back, too few signatures): no pod verifies against them.",
            ["namespace", "interface"], registry=self.registry)
        self.verdict_writes_failed = Counter(
            "lockstep_verdict_writes_failed_total",
            "Pod condition writes the API server did not take (each is retried until it lands or the pod is gone).",
            registry=self.registry)
        self.verdicts_unwritten = Gauge(
            "lockstep_verdicts_unwritten",
            "Pods whose latest verdict has not landed yet (retried every write_retry_interval).",
            registry=self.registry)
        self.crd_missing_fields = Gauge(
            "lockstep_crd_missing_fields",
            "Fields this operator writes or reads that the installed MCPServerInterface CRD lacks (the API server "
            "prunes them), checked at start (lockstep.operator.crd_check); the log and an Event name them.",
            registry=self.registry)
        self.sidecar_versions = SidecarVersions(self.registry)
        self._finding_labels: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        self._clients: dict[tuple[str, str], set[str]] = {}

    def count_withheld(self, namespace: str, interface: str, kind: str, reason: str, action: str, client: str,
                       count: int) -> None:
        clients = self._clients.setdefault((namespace, interface), set())
        if client not in clients and len(clients) >= MAX_CLIENT_LABELS:
            client = "other"
        clients.add(client)
        self.proxy_withheld.labels(namespace, interface, kind, reason, action, client).inc(count)

    def set_pod_counts(self, namespace: str, interface: str, counts: Mapping[PodState, int]) -> None:
        for state in PodState:
            self.pods.labels(namespace, interface, state.value).set(counts.get(state, 0))

    def set_findings(self, namespace: str, interface: str,
                     counts: Mapping[tuple[str, str, str], int]) -> None:
        """Set the drift gauge; label sets that are gone drop to zero by removal."""
        key = (namespace, interface)
        for stale in self._finding_labels.get(key, set()) - set(counts):
            self.drift_findings.remove(namespace, interface, *stale)
        for labels, count in counts.items():
            self.drift_findings.labels(namespace, interface, *labels).set(count)
        self._finding_labels[key] = set(counts)

    def forget_resource(self, namespace: str, interface: str) -> None:
        for state in PodState:
            _remove(self.pods, namespace, interface, state.value)
        self.set_findings(namespace, interface, {})
        _remove(self.last_verification, namespace, interface)
        _remove(self.proxy_bypassing, namespace, interface)
        _remove(self.approvals_untrusted, namespace, interface)

    async def serve(self, request: web.Request) -> web.Response:
        return web.Response(body=exposition(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def initialise(self, reasons: Iterable[str] = REJECTION_REASONS) -> None:
        """Export the rejection counters at zero so that rate() works from the first rejection."""
        for reason in reasons:
            self.reports_rejected.labels(reason)
        for outcome in ("accepted", "rejected", "relayed"):
            self.report_duration.labels(outcome)


class SidecarVersions(Collector):
    """``lockstep_sidecar_versions{version, supported}``: the pods whose last report this replica judged, by
    their sidecar's version and whether the version-skew policy supports it (lockstep.core.skew). Counted at
    scrape time by ``source`` (lockstep.operator.skew_watch.SkewWatch.counts), which drops pods that are
    gone; ``version`` is bounded there (at most MAX_VERSION_LABELS values, then ``other``)."""

    NAME = "lockstep_sidecar_versions"

    def __init__(self, registry: CollectorRegistry) -> None:
        self.source: Callable[[], Mapping[tuple[str, str], int]] | None = None
        registry.register(self)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.NAME, "Pods by their Lockstep sidecar's version (none: a sidecar "
                                   "older than 0.2.0), and whether the operator's version-skew policy supports it.",
                                   labels=["version", "supported"])
        for (version, supported), count in sorted((self.source() if self.source is not None else {}).items()):
            family.add_metric([version, supported], count)
        yield family


def exposition(registry: CollectorRegistry) -> bytes:
    """The text of a scrape, written with the cyclic garbage collector paused: a scrape builds a sample
    object per series (tens of thousands with 1,000 resources), all freed by reference counting when it
    ends; with the collector on, their number alone starts collections that walk the operator's whole
    heap (its pods, kopf's state), and promotes them, which brings the next full collection closer."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return generate_latest(registry)
    finally:
        if paused:
            gc.enable()


def _remove(metric: Gauge, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
