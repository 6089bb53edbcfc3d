"""The proxy's Prometheus metrics (``lockstep_proxy_*``), on a registry of its own."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from lockstep.proxy.policy import Finding

__all__ = ["ProxyMetrics"]


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter("lockstep_proxy_requests", "HTTP requests the proxy received, by HTTP method.",
                                ["method"], registry=self.registry)
        self.findings = Counter(
            "lockstep_proxy_findings",
            "Components not approved that a client was sent a response about, by action (withheld, blocked, "
            "audited, refused-call), component kind, reason and client (clientInfo name; at most 20, then other).",
            ["action", "kind", "reason", "client"], registry=self.registry)
        self.calls = Counter("lockstep_proxy_calls", "tools/call, prompts/get and resources/read requests, "
                             "by outcome (forwarded, refused).", ["outcome"], registry=self.registry)
        self.unjudged = Counter("lockstep_proxy_unjudged", "Responses or streams refused because they could not "
                                "be checked (over the size limit, not JSON).", registry=self.registry)
        self.refused_hosts = Counter("lockstep_proxy_refused_hosts", "Requests refused by their Host or Origin "
                                     "header (DNS-rebinding protection).", registry=self.registry)
        self.isolated = Counter("lockstep_proxy_isolated", "Requests refused because the pod is isolated "
                                "(enforcement Isolate, its verdict not True).", registry=self.registry)
        self.upstream_seconds = Histogram("lockstep_proxy_upstream_seconds", "Time until the upstream server's "
                                          "response headers arrived.", registry=self.registry,
                                          buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10))

    def finding(self, finding: Finding, client_label: str) -> None:
        self.findings.labels(finding.action, finding.verdict.kind.value, finding.verdict.reason.value,
                             client_label).inc()

    def web_app(self) -> web.Application:
        """``/metrics`` in the Prometheus text format (``lockstep proxy --metrics-port``)."""
        async def serve_metrics(request: web.Request) -> web.Response:
            response = web.Response(body=generate_latest(self.registry))
            response.headers["Content-Type"] = CONTENT_TYPE_LATEST
            return response

        app = web.Application()
        app.router.add_get("/metrics", serve_metrics)
        return app
