"""The pod-mutating webhook, fed real AdmissionReview JSON through kopf's admission engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from lockstep_testing.webhook_pods import NAMESPACE, plain_pod, weather_interface

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


@pytest.fixture
def operator_ca() -> str:
    return CA_PEM


def expected_sidecar(interface: str = "weather", port: int = 8000, interval: str = "30",
                     timeout: str = "5", sidecar_port: int = 9090, proxy_port: int | None = 8090) -> dict[str, Any]:
    """The sidecar injected for an Isolate resource (the default): it runs the in-line proxy (issue 28)."""
    if not interface:
        proxy_port = None
    # Every variable, empty ones too: only what the container sets beats the kubelet's Service links.
    env = {"LOCKSTEP_MCP_URL": "", "LOCKSTEP_MCP_PORT": str(port), "LOCKSTEP_MCP_PATH": "/mcp",
           "LOCKSTEP_MCP_TRANSPORT": "streamable-http", "LOCKSTEP_INTERFACE": interface,
           "LOCKSTEP_PROBE_INTERVAL": interval, "LOCKSTEP_PROBE_TIMEOUT": timeout,
           "LOCKSTEP_OPERATOR_URL": "https://lockstep.lockstep-system.svc:8443",
           "LOCKSTEP_TOKEN_PATH": "/var/run/secrets/lockstep.dev/token",
           "LOCKSTEP_OPERATOR_CA": CA_PEM, "LOCKSTEP_HEADERS_DIR": "", "LOCKSTEP_SIDECAR_PORT": str(sidecar_port),
           "LOCKSTEP_PROXY_PORT": str(proxy_port or ""), "LOCKSTEP_PROBE_CLIENT_CAPABILITIES": "",
           "LOCKSTEP_PROXY_MODE": "isolate" if proxy_port else ""}
    pod_ip = {"name": "LOCKSTEP_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}
    ports = [{"name": "lockstep-http", "containerPort": sidecar_port, "protocol": "TCP"}]
    if proxy_port:
        ports.append({"name": "lockstep-mcp", "containerPort": proxy_port, "protocol": "TCP"})
    return {
        "name": "lockstep-sidecar",
        "image": "ghcr.io/lockstep-dev/lockstep:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "args": ["sidecar"],
        "restartPolicy": "Always",
        "env": [*({"name": name, "value": value} if value else {"name": name} for name, value in env.items()),
                pod_ip],
        "ports": ports,
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": sidecar_port},
                          "periodSeconds": 20, "timeoutSeconds": 3, "failureThreshold": 3},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": "lockstep-token", "mountPath": "/var/run/secrets/lockstep.dev",
                          "readOnly": True},
                         # The service-account admission plugin skips a container that mounts this path.
                         {"name": "lockstep-no-api-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                          "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}},
    }


TOKEN_VOLUME = {"name": "lockstep-token", "projected": {"defaultMode": 0o444, "sources": [
    {"serviceAccountToken": {"audience": "lockstep.dev", "path": "token", "expirationSeconds": 900}}]}}
NO_API_TOKEN_VOLUME = {"name": "lockstep-no-api-token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}
GATE = {"conditionType": "lockstep.dev/interface-verified"}


def injected(pod: dict[str, Any], sidecar: dict[str, Any] | None = None) -> dict[str, Any]:
    """The exact pod the webhook should produce from ``pod``."""
    result = copy.deepcopy(pod)
    spec = result["spec"]
    spec.setdefault("readinessGates", []).append(GATE)
    spec.setdefault("volumes", []).extend([TOKEN_VOLUME, NO_API_TOKEN_VOLUME])
    spec.setdefault("initContainers", []).append(sidecar or expected_sidecar())
    return result


async def test_plain_pod_gets_sidecar_gate_and_token(admit: Any, interfaces: list[Any], events: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    admitted = await admit(pod)
    assert admitted.response["response"]["allowed"] is True
    assert admitted.pod == injected(pod)
    assert "warnings" not in admitted.response["response"]
    assert events == []


async def test_application_containers_are_left_alone(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    admitted = await admit(pod)
    assert admitted.pod["spec"]["containers"] == pod["spec"]["containers"]
    assert admitted.pod["spec"]["securityContext"] == pod["spec"]["securityContext"]
    mounts = [m["name"] for c in admitted.pod["spec"]["containers"] for m in c.get("volumeMounts", [])]
    assert "lockstep-token" not in mounts


async def test_second_admission_adds_nothing(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    once = await admit(plain_pod())
    twice = await admit(once.pod)
    assert twice.ops == []
    assert "patch" not in twice.response["response"]
    assert twice.pod == once.pod


async def test_partly_injected_pod_gets_only_what_is_missing(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["readinessGates"] = [GATE]
    admitted = await admit(pod)
    assert admitted.pod["spec"]["readinessGates"] == [GATE]
    assert admitted.pod == injected(plain_pod())


async def test_sidecar_goes_after_the_pods_own_init_containers(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    migrate = {"name": "migrate", "image": "example.com/weather-mcp:1.4", "command": ["migrate"]}
    pod["spec"]["initContainers"] = [migrate]
    admitted = await admit(pod)
    hardened = injected(pod)  # the pod's own init container drops NET_RAW too (security review 2, S6-10)
    hardened["spec"]["initContainers"][0]["securityContext"] = {"allowPrivilegeEscalation": False,
                                                                "capabilities": {"drop": ["NET_RAW"]}}
    assert admitted.pod == hardened
    assert [c["name"] for c in admitted.pod["spec"]["initContainers"]] == ["migrate", "lockstep-sidecar"]


async def test_own_readiness_gates_are_kept(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["readinessGates"] = [{"conditionType": "example.com/warm-cache"}]
    admitted = await admit(pod)
    assert admitted.pod == injected(pod)
    assert admitted.pod["spec"]["readinessGates"] == [{"conditionType": "example.com/warm-cache"}, GATE]


async def test_pod_without_volumes_gets_a_volumes_list(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    del pod["spec"]["volumes"]
    del pod["spec"]["containers"][0]["volumeMounts"]
    admitted = await admit(pod)
    assert admitted.pod == injected(pod)
    assert admitted.pod["spec"]["volumes"] == [TOKEN_VOLUME, NO_API_TOKEN_VOLUME]


@pytest.mark.parametrize(("labels", "namespace"), [
    ({"lockstep.dev/inject": "enabled"}, "kube-system"),
    ({"lockstep.dev/inject": "enabled"}, "lockstep-system"),
])
async def test_pods_not_opted_in_are_untouched(admit: Any, interfaces: list[Any], events: list[Any],
                                               labels: dict[str, str], namespace: str) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod(**labels)
    pod["metadata"]["namespace"] = namespace
    admitted = await admit(pod, namespace=namespace)
    assert admitted.response["response"]["allowed"] is True
    assert admitted.ops == []
    assert admitted.pod == pod
    assert events == []


async def test_pod_selected_by_no_interface_is_held_out_and_an_event_says_so(
        admit: Any, events: list[Any]) -> None:
    pod = plain_pod()
    admitted = await admit(pod)
    sidecar = expected_sidecar(interface="", port=8080, interval="60", timeout="10")
    assert admitted.pod == injected(pod, sidecar)
    [(target, reason, message)] = events
    assert reason == "InterfaceNotFound"
    assert (target["kind"], target["name"], target["namespace"]) == ("ReplicaSet", "weather-7d9f", NAMESPACE)
    assert "no MCPServerInterface selects it" in message
    assert admitted.response["response"]["warnings"] == [message]


async def test_dry_run_posts_no_event(admit: Any, events: list[Any]) -> None:
    admitted = await admit(plain_pod(), dry_run=True)
    assert admitted.pod["spec"]["readinessGates"] == [GATE]
    assert events == []


async def test_annotation_picks_the_interface(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    other = weather_interface(port=9000, transport="sse", path="/sse")
    other["metadata"]["name"] = "weather-legacy"
    other["spec"]["selector"] = {"matchLabels": {"app": "nothing"}}
    interfaces.append(other)
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"lockstep.dev/interface": "weather-legacy"}
    admitted = await admit(pod)
    env = {e["name"]: e.get("value", "") for e in admitted.pod["spec"]["initContainers"][0]["env"]}
    assert (env["LOCKSTEP_INTERFACE"], env["LOCKSTEP_MCP_PORT"], env["LOCKSTEP_MCP_TRANSPORT"],
            env["LOCKSTEP_MCP_PATH"]) == ("weather-legacy", "9000", "sse", "/sse")


async def test_annotation_naming_a_missing_interface_fails_closed(admit: Any, interfaces: list[Any],
                                                                  events: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"lockstep.dev/interface": "gone"}
    admitted = await admit(pod)
    assert admitted.pod["spec"]["readinessGates"] == [GATE]
    [(_, reason, message)] = events
    assert reason == "InterfaceNotFound" and "'gone'" in message


async def test_interface_in_another_namespace_does_not_apply(admit: Any, interfaces: list[Any],
                                                             events: list[Any]) -> None:
    elsewhere = weather_interface()
    elsewhere["metadata"]["namespace"] = "other"
    interfaces.append(elsewhere)
    admitted = await admit(plain_pod())
    env = {e["name"]: e.get("value") for e in admitted.pod["spec"]["initContainers"][0]["env"]}
    assert not env["LOCKSTEP_INTERFACE"]
    assert [reason for _, reason, _ in events] == ["InterfaceNotFound"]


async def test_named_port_and_headers_secret(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface(port="mcp", headersFrom={"secretName": "weather-probe-headers"}))
    admitted = await admit(plain_pod())
    spec = admitted.pod["spec"]
    sidecar = spec["initContainers"][0]
    env = {e["name"]: e.get("value", "") for e in sidecar["env"]}
    assert env["LOCKSTEP_MCP_PORT"] == "8000"
    assert env["LOCKSTEP_HEADERS_DIR"] == "/etc/lockstep/headers"
    assert {"name": "lockstep-headers", "mountPath": "/etc/lockstep/headers", "readOnly": True} \
        in sidecar["volumeMounts"]
    assert {"name": "lockstep-headers", "secret": {"secretName": "weather-probe-headers", "defaultMode": 0o444}} \
        in spec["volumes"]
    app_mounts = [m["name"] for m in spec["containers"][0]["volumeMounts"]]
    assert "lockstep-headers" not in app_mounts


async def test_sidecar_port_moves_off_a_port_the_pod_uses(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    pod = plain_pod()
    pod["spec"]["containers"][0]["ports"].append({"name": "metrics", "containerPort": 9090})
    admitted = await admit(pod)
    assert admitted.pod == injected(pod, expected_sidecar(sidecar_port=9091))


async def test_lookup_failure_refuses_the_pod(admit: Any, interfaces: list[Any]) -> None:
    interfaces.append({"metadata": {}})  # the lookup breaks on it: a stand-in for an API error
    admitted = await admit(plain_pod())
    response = admitted.response["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert "cannot inject the sidecar" in response["status"]["message"]


async def test_unreadable_operator_ca_refuses_the_pod(admit: Any, config: Any, interfaces: list[Any]) -> None:
    interfaces.append(weather_interface())
    config.operator_ca_path = "/nonexistent/ca.crt"
    response = (await admit(plain_pod())).response["response"]
    assert (response["allowed"], response["status"]["code"]) == (False, 503)
    assert "/nonexistent/ca.crt" in response["status"]["message"]


async def test_requests_are_counted_by_outcome(admit: Any, interfaces: list[Any], webhook_metrics: Any) -> None:
    interfaces.append(weather_interface())
    once = await admit(plain_pod())
    await admit(once.pod)
    await admit(plain_pod(**{"lockstep.dev/inject": "disabled"}))  # refused: no opt-out allowed by default
    assert [webhook_metrics.count(outcome) for outcome in ("injected", "unchanged", "skipped", "refused")] == \
        [1, 1, 0, 1]


def test_a_shards_webhook_lists_only_its_own_resources() -> None:
    """A label shard's mutating webhook binds a pod only against the shard's MCPServerInterfaces: the
    list it asks the API server for carries the shard's --watch-label-selector (another release's
    resource in the same namespace never binds a pod this release injects)."""
    from urllib.parse import parse_qs, urlsplit

    from lockstep.operator.webhooks import KopfApiLookup

    assert KopfApiLookup().list_path("agents") == "/apis/lockstep.dev/v1alpha1/namespaces/agents/mcpserverinterfaces"
    sharded = urlsplit(KopfApiLookup("lockstep.dev/shard in (a,b),!legacy").list_path("agents"))
    assert sharded.path == "/apis/lockstep.dev/v1alpha1/namespaces/agents/mcpserverinterfaces"
    assert parse_qs(sharded.query) == {"labelSelector": ["lockstep.dev/shard in (a,b),!legacy"]}
