"""``lockstep operator``: run the operator. Every option also reads a ``LOCKSTEP_*`` variable
(a flag beats the environment, which beats the default), but the hidden timing options the tests shorten
heartbeats and retries with (flags only)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from lockstep.operator.config import OperatorConfig

__all__ = ["operator_command"]


def _json_object(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as error:
        raise click.BadParameter(f"not JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object")
    return parsed


def _label_selector(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    from lockstep.operator.shard import LabelSelector

    try:
        return str(LabelSelector.parse(value or ""))
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _seconds_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, ...]:
    try:
        seconds = tuple(float(part) for part in (value or "").split(",") if part.strip())
    except ValueError as error:
        raise click.BadParameter(f"not a comma-separated list of seconds: {error}") from None
    if any(not 0 < second < 3600 for second in seconds):
        raise click.BadParameter("each wait must be more than 0 and less than an hour")
    return seconds


def _unicast_address(context: click.Context, parameter: click.Parameter, value: str) -> str:
    """--advertise-address: an IP literal of a unicast pod address, checked at start (a name or a loopback
    address would make every reportTo answer unusable to the sidecars)."""
    if not value:
        return value
    from lockstep.core.wire import AddressError, replica_host

    try:
        return replica_host(value.strip())
    except AddressError as error:
        raise click.BadParameter(f"{error} (the pod IP, from the downward API status.podIP)") from None


@click.command("operator")
@click.option("-n", "--namespace", "namespaces", multiple=True, envvar="LOCKSTEP_NAMESPACES",
              help="Namespace to watch (repeatable; env: space-separated). Default: the whole cluster.")
@click.option("--watch-label-selector", default="", envvar="LOCKSTEP_WATCH_LABEL_SELECTOR",
              callback=_label_selector,
              help="Handle only the MCPServerInterfaces whose labels match this selector (kubectl -l syntax, "
                   "e.g. lockstep.dev/shard=a): one shard of several releases. Default: all of them.")
@click.option("--watch-pod-selector", default="", envvar="LOCKSTEP_WATCH_POD_SELECTOR",
              callback=_label_selector,
              help="Watch only the pods whose labels match this selector (the pods this release injects): "
                   "a shard's memory is its own pods'. Default: every pod.")
@click.option("--report-port", type=click.IntRange(0, 65535), default=8443, show_default=True,
              envvar="LOCKSTEP_REPORT_PORT", help="HTTPS port of POST /v1/reports.")
@click.option("--tls-cert", type=click.Path(dir_okay=False), envvar="LOCKSTEP_TLS_CERT",
              help="Certificate (PEM) of the report endpoint and the webhooks.")
@click.option("--tls-key", type=click.Path(dir_okay=False), envvar="LOCKSTEP_TLS_KEY", help="Its private key (PEM).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              envvar="LOCKSTEP_METRICS_PORT", help="Port of the Prometheus /metrics endpoint.")
@click.option("--health-port", type=click.IntRange(0, 65535), default=8081, show_default=True,
              envvar="LOCKSTEP_HEALTH_PORT", help="Port of kopf's /healthz liveness endpoint (0: off).")
@click.option("--webhook-port", type=click.IntRange(0, 65535), default=9443, show_default=True,
              envvar="LOCKSTEP_WEBHOOK_PORT", help="HTTPS port of the admission webhooks (0: off).")
@click.option("--body-limit", type=click.IntRange(1024), default=4 * 1024 * 1024, show_default=True,
              envvar="LOCKSTEP_BODY_LIMIT", help="Largest report body in bytes.")
@click.option("--rate-per-pod", type=click.FloatRange(0.01), default=1.0, show_default=True,
              envvar="LOCKSTEP_RATE_PER_POD", help="Sustained reports per second per pod.")
@click.option("--rate-burst", type=click.IntRange(1), default=10, show_default=True,
              envvar="LOCKSTEP_RATE_BURST", help="Reports a pod may send at once.")
@click.option("--observed-configmap-limit", type=click.IntRange(0), default=5, show_default=True,
              envvar="LOCKSTEP_OBSERVED_CONFIGMAP_LIMIT",
              help="ConfigMaps per resource for observed definitions too large for status (0: none).")
@click.option("--observed-configmap-size-limit", type=click.IntRange(1024, 1000 * 1024), default=900 * 1024,
              show_default=True, envvar="LOCKSTEP_OBSERVED_CONFIGMAP_SIZE_LIMIT",
              help="Largest definitions (bytes of JSON) kept in such a ConfigMap.")
@click.option("--peering", "peering_name", envvar="LOCKSTEP_PEERING",
              help="Name of the peering object the replicas share work through; set it when running two or "
                   "more replicas.")
@click.option("--advertise-address", default="", envvar="LOCKSTEP_POD_IP", callback=_unicast_address,
              help="This replica's address for the other replicas (the pod IP), published in the peering "
                   "object: the others relay to it the reports for the resources it owns.")
@click.option("--sidecar-image", default="ghcr.io/lockstep-dev/lockstep:latest", show_default=True,
              envvar="LOCKSTEP_SIDECAR_IMAGE", help="Image of the injected sidecar.")
@click.option("--sidecar-resources", callback=_json_object, envvar="LOCKSTEP_SIDECAR_RESOURCES",
              help='Resources of the sidecar, as JSON: {"requests": {...}, "limits": {...}}.')
@click.option("--report-url", default="", envvar="LOCKSTEP_REPORT_URL",
              help="Base URL sidecars report to (the operator's Service).")
@click.option("--operator-ca", "operator_ca_path", type=click.Path(dir_okay=False), envvar="LOCKSTEP_OPERATOR_CA",
              help="CA bundle (PEM) that signs the report endpoint's certificate, given to sidecars.")
@click.option("--token-expiration", "token_expiration_seconds", type=click.IntRange(600), default=3600,
              show_default=True, envvar="LOCKSTEP_TOKEN_EXPIRATION", help="Lifetime of sidecar tokens (seconds).")
@click.option("--own-namespace", default="", envvar="LOCKSTEP_OWN_NAMESPACE",
              help="The operator's namespace (never injected).")
@click.option("--source-rate", type=click.FloatRange(0), default=20.0, show_default=True,
              envvar="LOCKSTEP_SOURCE_RATE",
              help="Per source address: reports/s with a token no cache knows (each costs a TokenReview); 0 = off.")
@click.option("--source-burst", type=click.IntRange(1), default=50, show_default=True, envvar="LOCKSTEP_SOURCE_BURST",
              help="Burst of --source-rate.")
@click.option("--status-write-interval", type=click.FloatRange(0), default=5.0, show_default=True,
              envvar="LOCKSTEP_STATUS_WRITE_INTERVAL",
              help="Seconds between two writes of one MCPServerInterface's status (its pods' conditions are "
                   "written at once).")
@click.option("--max-clock-skew", type=click.FloatRange(1), default=120.0, show_default=True,
              envvar="LOCKSTEP_MAX_CLOCK_SKEW", help="Largest gap (s) between a report's sentAt and this clock.")
@click.option("--allow-opt-out", "allow_opt_out", multiple=True, envvar="LOCKSTEP_ALLOW_OPT_OUT",
              help="Opted-in namespace where pods may opt out with lockstep.dev/inject=disabled (repeatable; "
                   "'*' for all). By default none may.")
@click.option("-v", "--verbose", is_flag=True, envvar="LOCKSTEP_VERBOSE", help="Log at debug level.")
@click.option("--peering-heartbeat", type=click.FloatRange(0.01), default=OperatorConfig.peering_heartbeat,
              hidden=True, help="Seconds between renewals of this replica's peering entry (tests).")
@click.option("--peering-lifetime", type=click.IntRange(1), default=OperatorConfig.peering_lifetime, hidden=True,
              help="Seconds a peering entry stands without renewal (tests).")
@click.option("--api-backoffs", callback=_seconds_list, default=None, hidden=True,
              help="Comma-separated waits between retries when the Kubernetes API fails (tests).")
@click.option("--api-backoff-then", type=click.FloatRange(0.01), default=OperatorConfig.api_backoff_then,
              hidden=True, help="The wait between retries after those (tests).")
@click.option("--api-probe-interval", type=click.FloatRange(0.01), default=OperatorConfig.api_probe_interval,
              hidden=True, help="Seconds between probes while the Kubernetes API is away (tests).")
def operator_command(namespaces: Sequence[str], watch_label_selector: str, watch_pod_selector: str,
                     report_port: int,
                     tls_cert: str | None, tls_key: str | None,
                     metrics_port: int, health_port: int, webhook_port: int, body_limit: int,
                     rate_per_pod: float, rate_burst: int, observed_configmap_limit: int,
                     observed_configmap_size_limit: int, peering_name: str | None, advertise_address: str,
                     sidecar_image: str,
                     sidecar_resources: dict[str, Any], report_url: str, operator_ca_path: str | None,
                     token_expiration_seconds: int, own_namespace: str, source_rate: float, source_burst: int,
                     status_write_interval: float, max_clock_skew: float, allow_opt_out: Sequence[str], verbose: bool,
                     peering_heartbeat: float, peering_lifetime: int, api_backoffs: tuple[float, ...],
                     api_backoff_then: float, api_probe_interval: float) -> None:
    """Run the Lockstep operator: the report endpoint, judging, status, Events, metrics and webhooks.

    \b
    Examples:
      lockstep operator --tls-cert /tls/tls.crt --tls-key /tls/tls.key
      LOCKSTEP_NAMESPACES="agents tools" lockstep operator --peering lockstep
      lockstep operator --watch-label-selector lockstep.dev/shard=a --peering lockstep-a
    """
    from lockstep.operator.app import LockstepOperator

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        # kopf logs each handler's success for every watch event at INFO: a line per pod event, about 2.5 %
        # of the operator's CPU at 10,000 pods (bench/operator.py, docs/scale.md). Its warnings still show.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")
    config = OperatorConfig(
        namespaces=tuple(name for entry in namespaces for name in entry.split()),
        watch_label_selector=watch_label_selector, watch_pod_selector=watch_pod_selector,
        report_port=report_port,
        tls_cert_path=tls_cert, tls_key_path=tls_key, metrics_port=metrics_port, health_port=health_port,
        webhook_port=webhook_port, body_limit=body_limit, rate_per_pod=rate_per_pod, rate_burst=rate_burst,
        observed_configmap_limit=observed_configmap_limit,
        observed_configmap_size_limit=observed_configmap_size_limit,
        peering_name=peering_name, advertise_address=advertise_address, sidecar_image=sidecar_image, sidecar_resources=sidecar_resources,
        report_url=report_url, operator_ca_path=operator_ca_path,
        token_expiration_seconds=token_expiration_seconds, own_namespace=own_namespace,
        allow_opt_out=tuple(name for entry in allow_opt_out for name in entry.split()),
        source_rate=source_rate, source_burst=source_burst, max_clock_skew=max_clock_skew,
        status_write_interval=status_write_interval,
        peering_heartbeat=peering_heartbeat, peering_lifetime=peering_lifetime,
        api_backoffs=api_backoffs or OperatorConfig.api_backoffs, api_backoff_then=api_backoff_then,
        api_probe_interval=api_probe_interval,
    )
    _require_credentials()
    asyncio.run(LockstepOperator(config).run())


IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def _require_credentials() -> None:
    """One clear line instead of kopf's retries and tracebacks when there is no cluster to talk to."""
    from lockstep.cli.targets import UsageError

    if os.environ.get("KUBERNETES_SERVICE_HOST") and IN_CLUSTER_TOKEN.exists():
        return
    import kubernetes

    try:
        kubernetes.config.load_kube_config()
    except Exception as error:  # noqa: BLE001 - any reason: say it in one line
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(f"no Kubernetes credentials: not running in a cluster, and no usable kubeconfig "
                         f"({where}: {reason}); run it in the chart's Deployment, or set KUBECONFIG") from None
