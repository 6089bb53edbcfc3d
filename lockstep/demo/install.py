"""Lockstep installed on a real control plane the way the chart installs it, for ``lockstep demo --backend
real``, the envtest tier and the benches: the CRDs as shipped, the chart's ServiceAccount and RBAC as the real
Helm engine renders them, the real operator running with a token of that ServiceAccount (so the chart's RBAC
is proven sufficient), and the chart's webhook configurations pointed at the operator on loopback.

    async with install_lockstep(plane, folder) as lockstep:
        lockstep.operator.report_port, lockstep.config, lockstep.ca_pem

The chart is read from a source checkout (charts/lockstep): the wheel does not ship it (see find_chart).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lockstep.core.names import API_VERSION, KIND, PLURAL, POLICY_KIND, POLICY_PLURAL
from lockstep.demo.certificates import Certificates, host_address
from lockstep.demo.cluster import loopback_operator_config
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError, free_port
from lockstep.demo.operator_thread import RunningOperator, run_operator_thread
from lockstep.operator.config import OperatorConfig

__all__ = ["KINDS", "RELEASE", "SYSTEM_NAMESPACE", "ChartNotFound", "Installation", "api_path", "apply",
           "documents", "find_chart", "install_crds", "install_lockstep", "render_chart"]

CHART = Path("charts") / "lockstep"
#: kopf's peering CRDs, which the chart keeps in crds/ (Helm creates them once, before the templates).
PEERING_CRDS = Path("crds") / "kopfpeerings.kopf.dev.yaml"


class ChartNotFound(Exception):
    """No source checkout with the Helm chart next to this installation or in the working directory."""


def find_chart() -> Path:
    """charts/lockstep of the checkout this package runs from (an editable install), or of the working
    directory or one of its parents. The wheel does not ship the chart: it is the chart's one copy, and its
    own tests (tests/chart) keep it true."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd(), *Path.cwd().parents):
        if (root / CHART / "Chart.yaml").is_file() and (root / CHART / PEERING_CRDS).is_file():
            return root / CHART
    raise ChartNotFound("the real control-plane backend installs Lockstep's Helm chart (charts/lockstep) and "
                        "its CRDs from a source checkout, and this installation has none: run `lockstep demo` "
                        "from a clone of the repository (git clone …; make demo), or use --backend emulated")


RELEASE = "lockstep"
SYSTEM_NAMESPACE = "lockstep-system"
SIDECAR_IMAGE = "ghcr.io/lockstep-dev/lockstep:envtest"

#: Where each kind the installation applies lives in the API: (group/version prefix, plural, namespaced).
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Pod": ("/api/v1", "pods", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1",
                                       "validatingwebhookconfigurations", False),
    "ClusterKopfPeering": ("/apis/kopf.dev/v1", "clusterkopfpeerings", False),
    "KopfPeering": ("/apis/kopf.dev/v1", "kopfpeerings", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    KIND: (f"/apis/{API_VERSION}", PLURAL, True),
    POLICY_KIND: (f"/apis/{API_VERSION}", POLICY_PLURAL, False),
}
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ClusterKopfPeering",
              "KopfPeering")


def api_path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    prefix, plural, namespaced = KINDS[kind]
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    return f"{path}/{name}" if name else path


def apply(plane: ControlPlane, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Create ``body`` (an object of a kind in KINDS), or replace it when it exists."""
    namespace = body["metadata"].get("namespace") if KINDS[body["kind"]][2] else None
    suffix = "?dryRun=All" if dry_run else ""
    try:
        return dict(plane.call("POST", api_path(body["kind"], namespace) + suffix, body))
    except ControlPlaneError as error:
        if "HTTP 409" not in str(error):
            raise
    current = plane.call("GET", api_path(body["kind"], namespace, body["metadata"]["name"]))
    replacement = copy.deepcopy(body)
    replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return dict(plane.call("PUT", api_path(body["kind"], namespace, body["metadata"]["name"]) + suffix,
                           replacement))


def install_crds(plane: ControlPlane, timeout: float = 30.0) -> None:
    """Create the CRDs as the chart installs them, and wait until the API server serves them
    (Established): kopf's peering CRDs from the chart's crds/, then the MCPServerInterface CRD as the
    chart's template renders it (crds.install, the default; the root crds/ file plus the release's
    labels and helm.sh/resource-policy: keep)."""
    crds = [crd for crd in yaml.safe_load_all((find_chart() / PEERING_CRDS).read_text()) if crd]
    crds += [body for body in render_chart() if body["kind"] == "CustomResourceDefinition"]
    names = []
    for crd in crds:
        apply(plane, crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            status = plane.call("GET", api_path("CustomResourceDefinition", name=name)).get("status") or {}
            if any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.1)


def render_chart(values: dict[str, Any] | None = None, *, namespace: str = SYSTEM_NAMESPACE) -> list[dict[str, Any]]:
    """The chart's objects as the real Helm engine renders them (helm-python-sdk)."""
    from helm_python.chart import Chart

    with Chart.load(find_chart()) as chart:
        return documents(chart.render(values=values or {}, name=RELEASE, namespace=namespace, is_install=True))


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a render, NOTES.txt left out."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


@dataclass
class Installation:
    plane: ControlPlane
    config: OperatorConfig
    certificates: Certificates
    service_account: str
    operator_token: str
    webhook_port: int
    rendered: list[dict[str, Any]] = field(repr=False)
    operators: list[RunningOperator] = field(default_factory=list)

    @property
    def operator(self) -> RunningOperator:
        return self.operators[0]

    @property
    def ca_pem(self) -> str:
        return self.certificates.ca_pem

    def run_replica(self, **overrides: Any) -> contextlib.AbstractAsyncContextManager[RunningOperator]:
        """Another operator process-alike with the same ServiceAccount token (a second replica, or a
        restart): its own report port, the shared webhook registrations are not changed."""
        config = OperatorConfig(**{**self.config.__dict__, "report_port": free_port(), "webhook_port": 0,
                                   **overrides})
        return run_operator_thread(self.plane.kopf_connection(self.operator_token), config)


@contextlib.asynccontextmanager
async def install_lockstep(plane: ControlPlane, folder: Path, *, peering: bool = False,
                           values: dict[str, Any] | None = None, **config: Any) -> AsyncIterator[Installation]:
    """Install and run Lockstep on ``plane``; the operator stops when the block exits (the objects stay,
    as with ``helm uninstall`` of a release whose CRDs are kept). ``config``: OperatorConfig fields."""
    install_crds(plane)
    rendered = render_chart(values)
    apply(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
    for body in rendered:
        if body["kind"] in RBAC_KINDS:
            apply(plane, body)
    [account] = [body["metadata"]["name"] for body in rendered if body["kind"] == "ServiceAccount"]
    config, certificates = loopback_operator_config(
        folder, stale_check_interval=0.5, status_flush_interval=0.2, status_write_interval=0.0, sidecar_image=SIDECAR_IMAGE,
        own_namespace=SYSTEM_NAMESPACE, peering_name=RELEASE if peering else None,
        peering_priority=100 if peering else None, advertise_address=host_address() if peering else "",
        report_host="0.0.0.0" if peering else "127.0.0.1", **config)
    webhook_port = config.webhook_port
    token = plane.request_token(SYSTEM_NAMESPACE, account, seconds=3 * 3600)
    installation = Installation(plane, config, certificates, account, token, webhook_port, rendered)
    webhooks = [loopback_webhooks(body, webhook_port, certificates.ca_pem) for body in rendered
                if body["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")]
    async with run_operator_thread(plane.kopf_connection(token), config) as running:
        installation.operators.append(running)
        await _wait_listening(webhook_port)  # kopf starts its webhook server after the report endpoint
        for body in webhooks:
            apply(plane, body)
        try:
            yield installation
        finally:
            # As an uninstall does: webhooks that fail closed would refuse every later request.
            for body in webhooks:
                with contextlib.suppress(ControlPlaneError):
                    plane.call("DELETE", api_path(body["kind"], name=body["metadata"]["name"]))


def loopback_webhooks(configuration: dict[str, Any], port: int, ca_pem: str) -> dict[str, Any]:
    """The chart's webhook configuration with each Service reference replaced by a loopback URL on the
    same path, trusted through the test CA (the API server runs outside any cluster network)."""
    result = copy.deepcopy(configuration)
    for webhook in result["webhooks"]:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                   "caBundle": base64.b64encode(ca_pem.encode()).decode()}
    return result


async def _wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"nothing listens on the webhook port {port} after {timeout:.0f}s") from None
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return
