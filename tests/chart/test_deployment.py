"""The operator Deployment: arguments the real `lockstep operator` command accepts, the TLS files it
names mounted from the Secret, restricted pod security, probes and placement."""

from __future__ import annotations

from typing import Any

import click
import pytest
from helm_python.chart import Chart
from lockstep_testing.chart_render import ALL_ON, NAMESPACE, NAMESPACED, Render, documents, one

from lockstep import __version__
from lockstep.cli import cli

SCENARIOS = {"defaults": {}, "all-on": ALL_ON, "namespaced": NAMESPACED,
             "debug": {"logLevel": "debug", "operator": {"replicaCount": 1, "peering": {"enabled": False}}}}


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "operator")


def parse_operator_args(args: list[str]) -> dict[str, Any]:
    """Parse the container's arguments with the operator's own click command (not invoking it)."""
    assert args[0] == "operator"
    group_context = click.Context(cli)
    command = cli.get_command(group_context, "operator")
    assert command is not None and command.callback is not None
    assert "not available" not in (command.short_help or ""), "lockstep.operator.cli did not import"
    with command.make_context("operator", list(args[1:])) as context:
        return dict(context.params)


@pytest.mark.parametrize("values", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_operator_command_accepts_the_charts_arguments(render: Render, values: dict[str, Any]) -> None:
    params = parse_operator_args(operator_container(render(values))["args"])
    assert params["tls_cert"] and params["tls_key"] and params["operator_ca_path"]
    assert params["own_namespace"] == NAMESPACE
    assert params["report_url"] == f"https://demo-lockstep-reports.{NAMESPACE}.svc:8443"


def test_arguments_carry_the_values(render: Render) -> None:
    params = parse_operator_args(operator_container(render(NAMESPACED))["args"])
    assert params["namespaces"] == ("agents", "tools")
    assert params["peering_name"] == "demo-lockstep"
    assert params["sidecar_resources"] == {"limits": {"memory": "96Mi"}, "requests": {"cpu": "10m", "memory": "48Mi"}}
    assert params["sidecar_image"] == f"ghcr.io/lockstep-dev/lockstep:{__version__}"  # appVersion (test_version)
    assert params["token_expiration_seconds"] == 3600 and params["rate_burst"] == 10
    debug = parse_operator_args(operator_container(render(SCENARIOS["debug"]))["args"])
    assert debug["verbose"] is True and debug["peering_name"] is None


def test_a_pinned_digest_reaches_operator_and_sidecar_images(render: Render) -> None:
    container = operator_container(render(ALL_ON))
    digest = ALL_ON["image"]["digest"]
    assert container["image"] == f"ghcr.io/lockstep-dev/lockstep@{digest}"
    assert parse_operator_args(container["args"])["sidecar_image"] == container["image"]


def test_an_unknown_flag_is_refused_by_the_parser() -> None:
    """The check above can fail: a flag the operator does not have is a usage error."""
    with pytest.raises(click.UsageError, match="(?i)no such option"):
        parse_operator_args(["operator", "--log-level=info"])


def test_tls_files_named_in_arguments_come_from_the_tls_secret(render: Render) -> None:
    objects = render()
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = operator_container(objects)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    secret = one(objects, "Secret", volume["secret"]["secretName"])
    params = parse_operator_args(container["args"])
    for path in (params["tls_cert"], params["tls_key"], params["operator_ca_path"]):
        directory, _, key = path.rpartition("/")
        assert directory == mount["mountPath"] and key in secret["data"], path


def test_the_pod_meets_the_restricted_pod_security_standard(render: Render) -> None:
    objects = render(ALL_ON)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["readOnlyRootFilesystem"] is True
    assert not any(v.get("hostPath") for v in pod["volumes"])
    assert not pod.get("hostNetwork") and not pod.get("hostPID")


def test_probes_use_kopfs_health_endpoint_so_the_standby_is_ready_too(render: Render) -> None:
    """A leader-only readiness would leave the standby unready for good: rolling updates (maxUnavailable
    0 with two replicas), `helm --wait` and `kubectl rollout status` would never finish."""
    container = operator_container(render())
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"reports": 8443, "webhooks": 9443, "metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_a_disruption_budget_keeps_one_replica_through_drains(render: Render) -> None:
    objects = render()
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    single = render({"operator": {"replicaCount": 1, "peering": {"enabled": False}}})
    assert not [o for o in single if o["kind"] == "PodDisruptionBudget"]


def test_two_replicas_spread_over_nodes_and_zones_with_peering(render: Render) -> None:
    objects = render()
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    env = {e["name"]: e for e in operator_container(objects)["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # The address a standby relays reports to, published by each replica (lockstep.operator.replicas.relay).
    assert env["LOCKSTEP_POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    peering = one(objects, "ClusterKopfPeering")
    assert parse_operator_args(operator_container(objects)["args"])["peering_name"] == peering["metadata"]["name"]


def test_services_route_to_the_operator_ports(render: Render) -> None:
    objects = render()
    selector = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    expected = {"demo-lockstep-webhook": (443, "webhooks"), "demo-lockstep-reports": (8443, "reports"),
                "demo-lockstep-metrics": (8080, "metrics")}
    for name, (port, target) in expected.items():
        service = one(objects, "Service", name)
        assert service["spec"]["selector"].items() <= selector.items()
        assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, target)]


def test_sidecar_resources_reach_the_operator_as_json(chart: Chart, render: Render) -> None:
    values = {"sidecar": {"resources": {"requests": {"cpu": "5m"}}}}
    params = parse_operator_args(operator_container(render(values))["args"])
    assert params["sidecar_resources"]["requests"]["cpu"] == "5m"
    assert params["sidecar_resources"] == chart.merge_values(values)["sidecar"]["resources"]


def test_the_helm_test_pod_checks_the_report_url_the_sidecars_get_with_their_ca(render: Render) -> None:
    objects = render()
    test_pod = one(objects, "Pod", "demo-lockstep-test-reports")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [container] = test_pod["spec"]["containers"]
    script = container["args"][0]
    compile(script, "helm-test", "exec")
    report_url = parse_operator_args(operator_container(objects)["args"])["report_url"]
    assert f'"{report_url}/healthz"' in script
    [volume] = test_pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "demo-lockstep-tls"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert 'cafile="/etc/lockstep/tls/ca.crt"' in script
    assert container["volumeMounts"][0]["mountPath"] == "/etc/lockstep/tls"


def test_operator_settings_without_a_value_reach_it_through_extra_env(render: Render,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/operator.md sends the observed-ConfigMap bounds through operator.extraEnv: those variables
    must be ones the operator command reads."""
    extra = [{"name": "LOCKSTEP_OBSERVED_CONFIGMAP_LIMIT", "value": "2"},
             {"name": "LOCKSTEP_OBSERVED_CONFIGMAP_SIZE_LIMIT", "value": "4096"}]
    container = operator_container(render({"operator": {"extraEnv": extra}}))
    for variable in extra:
        assert variable in container["env"]
        monkeypatch.setenv(variable["name"], variable["value"])
    params = parse_operator_args(container["args"])
    assert (params["observed_configmap_limit"], params["observed_configmap_size_limit"]) == (2, 4096)


def service_link_variables(service: dict[str, Any], cluster_ip: str = "10.0.0.149") -> dict[str, str]:
    """The docker-link variables the kubelet injects for a Service (kubelet envvars.FromServices)."""
    prefix = service["metadata"]["name"].upper().replace("-", "_")
    ports = service["spec"]["ports"]
    first = ports[0]
    variables = {f"{prefix}_SERVICE_HOST": cluster_ip, f"{prefix}_SERVICE_PORT": str(first["port"]),
                 f"{prefix}_PORT": f"{first.get('protocol', 'TCP').lower()}://{cluster_ip}:{first['port']}"}
    for port in ports:
        protocol = port.get("protocol", "TCP")
        if port.get("name"):
            variables[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
        base = f"{prefix}_PORT_{port['port']}_{protocol}"
        variables.update({base: f"{protocol.lower()}://{cluster_ip}:{port['port']}", f"{base}_PROTO": protocol.lower(),
                          f"{base}_PORT": str(port["port"]), f"{base}_ADDR": cluster_ip})
    return variables


def test_the_readme_release_name_gets_no_service_links_that_break_the_operator(chart: Chart) -> None:
    """`helm install lockstep ...` names the Services lockstep-metrics and lockstep-webhook, and the kubelet
    would inject LOCKSTEP_METRICS_PORT=tcp://... into the operator: exactly its --metrics-port variable."""
    objects = documents(chart.render(values={}, name="lockstep", namespace=NAMESPACE, is_install=True))
    links: dict[str, str] = {}
    for service in (o for o in objects if o["kind"] == "Service"):
        links.update(service_link_variables(service))
    command = cli.get_command(click.Context(cli), "operator")
    assert command is not None
    operator_variables = {str(param.envvar) for param in command.params if getattr(param, "envvar", None)}
    assert operator_variables & links.keys(), "the collision this test guards against is no longer there"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    container = next(c for c in pod["containers"] if c["name"] == "operator")
    explicit = {variable["name"] for variable in container.get("env", [])}
    with pytest.raises(click.BadParameter):  # what the pod would do with the links: exit 2
        with command.make_context("operator", list(container["args"][1:]), auto_envvar_prefix=None) as context:
            for param in command.params:
                if getattr(param, "envvar", None) in links.keys() - explicit:
                    param.type_cast_value(context, links[str(param.envvar)])
