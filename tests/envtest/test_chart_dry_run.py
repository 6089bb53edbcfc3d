"""Every object the chart renders is accepted by a real kube-apiserver (server-side dry run, strict field
validation), in the default, all-on and namespaced renderings; the MCPServerInterface CRD, a template
now, as the update of the installed one that `helm upgrade` makes. Kinds of monitoring.coreos.com and
cert-manager.io are skipped only while their CRDs are absent from the control plane."""

from __future__ import annotations

from typing import Any

import pytest
from lockstep_testing.chart_render import ALL_ON, NAMESPACED
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep_testing.lockstep_install import KINDS, SYSTEM_NAMESPACE, api_path, apply, render_chart

OPTIONAL_GROUPS = ("monitoring.coreos.com", "cert-manager.io")
EXTRA_KINDS: dict[str, tuple[str, str, bool]] = {
    "ServiceMonitor": ("/apis/monitoring.coreos.com/v1", "servicemonitors", True),
    "PodMonitor": ("/apis/monitoring.coreos.com/v1", "podmonitors", True),
    "PrometheusRule": ("/apis/monitoring.coreos.com/v1", "prometheusrules", True),
    "Certificate": ("/apis/cert-manager.io/v1", "certificates", True),
    "Issuer": ("/apis/cert-manager.io/v1", "issuers", True),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("/apis/admissionregistration.k8s.io/v1",
                                         "validatingadmissionpolicybindings", False),
}


def _served(plane: ControlPlane, group: str) -> bool:
    try:
        plane.call("GET", f"/apis/{group}")
    except ControlPlaneError:
        return False
    return True


def _dry_run(plane: ControlPlane, body: dict[str, Any]) -> None:
    if body["kind"] == "CustomResourceDefinition":  # installed by the fixture: a dry-run update, as helm upgrade
        apply(plane, body, dry_run=True)
        return
    prefix, plural, namespaced = {**KINDS, **EXTRA_KINDS}[body["kind"]]
    namespace = body["metadata"].get("namespace") or SYSTEM_NAMESPACE
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    plane.call("POST", f"{path}?dryRun=All&fieldValidation=Strict", body)


@pytest.mark.parametrize("values", [{}, ALL_ON, NAMESPACED], ids=["default", "all-on", "namespaced"])
def test_every_rendered_object_passes_a_server_side_dry_run(crds_installed: ControlPlane,
                                                           values: dict[str, Any]) -> None:
    plane = crds_installed
    rendered = render_chart(values)
    # The release namespace and the watched namespaces exist before a chart is installed into them.
    for namespace in {SYSTEM_NAMESPACE} | {body["metadata"].get("namespace") or SYSTEM_NAMESPACE for body in rendered}:
        apply(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    checked, skipped = [], []
    for body in rendered:
        group = body["apiVersion"].split("/")[0] if "/" in body["apiVersion"] else ""
        if group in OPTIONAL_GROUPS and not _served(plane, group):
            skipped.append(body["kind"])
            continue
        try:
            _dry_run(plane, body)
        except ControlPlaneError as error:
            if "HTTP 409" not in str(error):  # exists already (installed by another test): not a refusal
                raise AssertionError(f"{body['kind']} {body['metadata']['name']}: {error}") from None
        checked.append(body["kind"])
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
            "Service", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= set(checked)
    if values is ALL_ON:
        assert {"ServiceMonitor", "PrometheusRule", "Certificate"} & set(checked + skipped)


def test_a_namespace_api_path_is_where_the_server_serves_it(crds_installed: ControlPlane) -> None:
    assert crds_installed.call("GET", api_path("Namespace", name="default"))["metadata"]["name"] == "default"
