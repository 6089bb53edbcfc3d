"""The operator's configuration: one frozen dataclass filled by ``lockstep operator``'s options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep.core.wire import DEFAULT_SIDECAR_PORT
from lockstep.operator.shard import LabelSelector

__all__ = ["OperatorConfig"]


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the operator needs to know at start; the cluster holds the rest."""

    #: Namespaces to watch; empty means the whole cluster.
    namespaces: tuple[str, ...] = ()
    #: Label selector (Kubernetes syntax) of the MCPServerInterface resources this operator handles, a
    #: shard of the cluster's (lockstep.operator.shard); empty means every resource.
    watch_label_selector: str = ""
    #: Label selector of the pods this operator watches (the chart's shard.podSelector, the pods its
    #: webhook injects); empty means every pod of the watched namespaces.
    watch_pod_selector: str = ""
    #: The report endpoint (HTTPS): ``POST /v1/reports``.
    report_host: str = "0.0.0.0"
    report_port: int = 8443
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    #: Prometheus ``/metrics``; None disables the metrics server (0 picks a free port, as for every port here).
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = 8080
    #: kopf's liveness endpoint ``/healthz``; 0 disables it.
    health_port: int = 8081
    #: Admission webhooks (kopf's webhook server, same TLS files); 0 disables them.
    webhook_port: int = 9443
    #: Largest report body accepted (bytes).
    body_limit: int = 4 * 1024 * 1024
    #: Per-pod token bucket: sustained reports per second and burst.
    rate_per_pod: float = 1.0
    rate_burst: int = 10
    #: Per source address, before authentication: requests with a token no cache knows (each costs a
    #: TokenReview) per second and burst; 0 turns the limit off.
    source_rate: float = 20.0
    source_burst: int = 50
    #: Open connections per source address (the other replicas exempt; 0: no limit), how long the body of
    #: an authenticated report may take to arrive, and how long an idle kept-alive connection stays open.
    connections_per_source: int = 256
    body_read_timeout: float = 10.0
    keepalive_timeout: float = 30.0
    #: Largest difference between a report's sentAt and the operator's clock (seconds).
    max_clock_skew: float = 120.0
    #: How long a reviewed token is trusted before it is reviewed again (seconds).
    token_cache_seconds: float = 300.0
    #: How often the stale timer runs, and how soon a changed resource status is written (seconds).
    stale_check_interval: float = 5.0
    status_flush_interval: float = 1.0
    #: How often verdicts that did not land are written again (a False is retried until it lands).
    write_retry_interval: float = 1.0
    #: A resource's status is written at most once in this many seconds: its first change at the next
    #: flush, the changes after it together (a rollout of its pods costs the API server one status write
    #: per resource every few seconds, not one per flush; the pods' conditions are written at once).
    status_write_interval: float = 5.0
    #: Largest definitions document kept in status for an unapproved observed revision (bytes of JSON).
    status_definitions_limit: int = 64 * 1024
    #: Larger ones go to a ConfigMap owned by the resource: at most this many per resource (the oldest
    #: revision loses its map first), each at most this large (a ConfigMap holds at most 1 MiB).
    observed_configmap_limit: int = 5
    observed_configmap_size_limit: int = 900 * 1024
    #: The peering object the replicas share work through (lockstep.operator.replicas.membership): None is one replica.
    peering_name: str | None = None
    #: Priority of this replica in peering; None picks a random one so that two replicas never tie.
    peering_priority: int | None = None
    #: This replica's address as the other replicas reach it (the pod IP), published in the peering
    #: object: the others relay to it the reports for the resources it owns. Empty: not published (a
    #: report for a resource it owns reaching another replica is answered 503, and sent again).
    advertise_address: str = ""
    #: How often this replica renews its entry in the peering object (seconds), and how long an entry
    #: stands without renewal: a killed replica's resources move this long after its last renewal
    #: (lockstep.operator.replicas.membership; read by LockstepOperator and Membership).
    peering_heartbeat: float = 5.0
    peering_lifetime: int = 20
    #: The waits between retries of kopf's requests and watches when the Kubernetes API fails: these,
    #: then ``api_backoff_then`` for ever (lockstep.operator.outage.EndlessBackoffs), and while the API
    #: server is away, how often the operator asks whether it is back (seconds).
    api_backoffs: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13)
    api_backoff_then: float = 15.0
    api_probe_interval: float = 1.0
    #: For the mutating webhook (lockstep.operator.webhooks).
    sidecar_image: str = "ghcr.io/lockstep-dev/lockstep:latest"
    sidecar_resources: dict[str, Any] = field(default_factory=dict)
    sidecar_port: int = DEFAULT_SIDECAR_PORT
    report_url: str = ""
    operator_ca_path: str | None = None
    token_expiration_seconds: int = 3600
    own_namespace: str = ""
    #: Namespaces where a pod may opt out of injection with lockstep.dev/inject=disabled ("*": all).
    allow_opt_out: tuple[str, ...] = ()

    @property
    def shard(self) -> LabelSelector | None:
        """The parsed watch_label_selector; None when the operator handles every resource."""
        return LabelSelector.parse(self.watch_label_selector) if self.watch_label_selector.strip() else None

    @property
    def pod_shard(self) -> LabelSelector | None:
        """The parsed watch_pod_selector; None when the operator watches every pod."""
        return LabelSelector.parse(self.watch_pod_selector) if self.watch_pod_selector.strip() else None

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_path and self.tls_key_path)
