"""The chart lints clean and every object it renders is valid, with defaults and with every toggle on."""

from __future__ import annotations

from typing import Any

import pytest
from helm_python.chart import Chart, lint
from lockstep_testing.chart_render import ALL_ON, CHART_DIR, CRD_FILES, NAMESPACE, NAMESPACED, Render, find, one
from lockstep_testing.k8s_schemas import KUBERNETES_VERSIONS, SchemaViolation, crd_schemas, validate_object

CRDS = crd_schemas(CRD_FILES)
SCENARIOS: dict[str, dict[str, Any]] = {"defaults": {}, "all-on": ALL_ON, "namespaced": NAMESPACED}


@pytest.mark.parametrize("values", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_lint_reports_no_warning_or_error(values: dict[str, Any]) -> None:
    report = lint(CHART_DIR, values, strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]


@pytest.mark.parametrize("kubernetes_version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_every_rendered_object_matches_its_schema(render: Render, values: dict[str, Any], kubernetes_version: str) -> None:
    used = {validate_object(obj, CRDS, kubernetes_version) for obj in render(values)}
    assert "kubernetes" in used


def test_all_toggles_render_their_objects(render: Render) -> None:
    objects = render(ALL_ON)
    kinds = {o["kind"] for o in objects}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Certificate", "Issuer", "ConfigMap",
            "ClusterKopfPeering", "PodDisruptionBudget"} <= kinds
    assert not find(objects, "Secret"), "with cert-manager the chart must not write the TLS Secret itself"
    validated = {validate_object(obj, CRDS) for obj in objects}
    assert validated == {"kubernetes", "crd", "vendored"}


def test_defaults_create_no_optional_monitoring_objects(render: Render) -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Certificate", "Issuer"}
    assert "ConfigMap" not in kinds


def test_a_misspelt_field_fails_validation(render: Render) -> None:
    service = one(render(), "Service", "demo-lockstep-webhook")
    service["spec"]["portz"] = service["spec"].pop("ports")
    with pytest.raises(SchemaViolation, match="portz"):
        validate_object(service, CRDS)


def test_a_misspelt_custom_resource_field_fails_validation(render: Render) -> None:
    monitor = one(render(ALL_ON), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(SchemaViolation, match="intervall"):
        validate_object(monitor, CRDS)


def test_the_pod_monitor_scrapes_the_port_the_webhook_gives_the_sidecar(render: Render) -> None:
    from lockstep.operator.injection import DEFAULT_SIDECAR_PORT, Binding, InjectionSettings, plan_injection

    monitor = one(render(ALL_ON), "PodMonitor")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}}
    ops = plan_injection(pod, InjectionSettings(image="i", report_url="https://x"), Binding())
    sidecar = next(op["value"][0] for op in ops if op["path"] == "/spec/initContainers")
    assert [p["name"] for p in sidecar["ports"]] == [monitor["spec"]["podMetricsEndpoints"][0]["port"]]
    assert sidecar["ports"][0]["containerPort"] == DEFAULT_SIDECAR_PORT
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_a_long_release_name_keeps_every_name_within_kubernetes_limits(chart: Chart) -> None:
    from lockstep_testing.chart_render import documents

    release = "a-very-long-release-name-for-the-lockstep-operator-x"  # 53 characters, Helm's maximum
    objects = documents(chart.render(values=ALL_ON, name=release, namespace=NAMESPACE, is_install=True))
    names = [o["metadata"]["name"] for o in objects if o["kind"] != "CustomResourceDefinition"]
    assert all(len(name) <= 63 and not name.endswith("-") for name in names), [n for n in names if len(n) > 63]
    services = [o["metadata"]["name"] for o in objects if o["kind"] == "Service"]
    assert len(set(services)) == len(services) == 3
    for obj in objects:
        validate_object(obj, CRDS)


def test_notes_tell_how_to_pin_a_first_server(chart: Chart) -> None:
    notes = chart.render(values={}, name="demo", namespace=NAMESPACE, is_install=True)["lockstep/templates/NOTES.txt"]
    assert "kubectl label namespace <namespace> lockstep.dev/inject=enabled" in notes
    assert "lockstep snapshot http://<server>:<port>/mcp --name <name> -n <namespace> | kubectl apply -f -" in notes
    assert f"kubectl -n {NAMESPACE} rollout status deployment/demo-lockstep-operator" in notes
    with_dashboard = chart.render(values={"dashboard": {"enabled": True}}, name="demo", namespace=NAMESPACE)
    assert "ConfigMap demo-lockstep-dashboard" in with_dashboard["lockstep/templates/NOTES.txt"]
