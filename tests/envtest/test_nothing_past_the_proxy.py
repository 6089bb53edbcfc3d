"""Issue 32 item 4 on a real control plane: nothing in a guarded pod answers agents past the in-line proxy.

* S6-10: the real admission chain makes every container of an injected pod drop NET_RAW and refuse privilege
  escalation, and refuses a pod that asks for it;
* S6-9: the chart's sidecar-markers policy refuses Lockstep's gate, sidecar name and token on a pod Lockstep
  does not inject (a namespace that did not opt in, or a pod that opted out), for anyone;
* S6-6: a pod created before its Isolate interface existed (its sidecar has no proxy) is judged ProxyMissing,
  never Verified, once the interface selects it;
* S6-4: ``lockstep check --pods`` names a Service that reaches the pods on another port than lockstep-mcp.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from lockstep_testing.cluster_objects import GATE, condition, lockstep_cli, pin, pod_of, weather_pod
from lockstep.demo.control_plane import ControlPlane, ControlPlaneError
from lockstep.demo.kubelet import Kubelet
from lockstep_testing.lockstep_install import Installation, api_path, apply, render_chart
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.polling import eventually
from lockstep_testing.tenant import policies_of

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
MARKERS_REFUSAL = "this pod is not one Lockstep injects"


def refused(plane: ControlPlane, body: dict[str, Any], path: str | None = None) -> str:
    with pytest.raises(ControlPlaneError, match="HTTP 403") as error:
        plane.call("POST", path or api_path("Pod", body["metadata"]["namespace"]), body)
    return str(error.value)


@pytest.fixture
def markers_policy(control_plane: ControlPlane) -> Iterator[None]:
    """The chart's sidecar-markers policy and its binding, created for real; deleted afterwards."""
    bodies = [body for body in policies_of(render_chart()) if body["metadata"]["name"].endswith("-sidecar-markers")]
    assert len(bodies) == 2
    for body in bodies:
        path = f"{ADMISSION}/{PLURALS[body['kind']]}"
        with contextlib.suppress(ControlPlaneError):
            control_plane.call("DELETE", f"{path}/{body['metadata']['name']}")
        control_plane.call("POST", path, body)
    yield
    for body in reversed(bodies):
        with contextlib.suppress(ControlPlaneError):
            control_plane.call("DELETE", f"{ADMISSION}/{PLURALS[body['kind']]}/{body['metadata']['name']}")


@pytest.fixture
def plain_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace that did not opt in."""
    name = "plain-" + secrets.token_hex(4)
    apply(control_plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    control_plane.call("DELETE", api_path("Namespace", name=name))


def _marked(namespace: str, name: str, marker: str) -> dict[str, Any]:
    pod = weather_pod(namespace, name)
    if marker == "gate":
        pod["spec"]["readinessGates"] = [{"conditionType": GATE}]
    elif marker == "sidecar":
        pod["spec"]["initContainers"] = [{"name": "lockstep-sidecar", "image": "evil.example.com/approved:1",
                                          "restartPolicy": "Always"}]
    else:
        pod["spec"]["volumes"] = [{"name": "lockstep-token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": "lockstep.dev", "path": "token", "expirationSeconds": 600}}]}}]
    return pod


def _until_refused(plane: ControlPlane, body: dict[str, Any], timeout: float = 30.0) -> str:
    """The API server enforces a policy once its informer has it: a dry run until it is refused."""
    path = api_path("Pod", body["metadata"]["namespace"]) + "?dryRun=All"
    deadline = time.monotonic() + timeout
    while True:
        try:
            plane.call("POST", path, body)
        except ControlPlaneError as error:
            if "HTTP 403" in str(error):
                return str(error)
            raise
        assert time.monotonic() < deadline, "the sidecar-markers policy never took effect"
        time.sleep(0.3)


async def test_lockstep_markers_are_refused_on_pods_lockstep_does_not_inject(
        control_plane: ControlPlane, markers_policy: None, plain_namespace: str) -> None:
    plane = control_plane
    assert MARKERS_REFUSAL in _until_refused(plane, _marked(plain_namespace, "probe", "gate"))
    for marker in ("gate", "sidecar", "token"):
        assert MARKERS_REFUSAL in refused(plane, _marked(plain_namespace, f"p-{marker}", marker)), marker
    apply(plane, weather_pod(plain_namespace, "ordinary"))  # the control: an ordinary pod there is untouched


async def test_an_opted_out_pod_may_not_gate_itself(control_plane: ControlPlane, lockstep: Installation,
                                                    markers_policy: None, namespace: str) -> None:
    """Even where the platform allows opting out, the policy refuses the markers (here the webhook refuses the
    opt-out itself first; tests/webhook covers the allowed case)."""
    pod = _marked(namespace, "counterfeit", "gate")
    pod["metadata"]["labels"]["lockstep.dev/inject"] = "disabled"
    message = refused(control_plane, pod)
    assert "may not opt out" in message or MARKERS_REFUSAL in message
    injected = apply(control_plane, weather_pod(namespace, "genuine"))  # the webhook's markers pass the policy
    assert {"conditionType": GATE} in injected["spec"]["readinessGates"]


async def test_every_container_drops_net_raw_through_the_real_admission_chain(
        control_plane: ControlPlane, lockstep: Installation, namespace: str) -> None:
    plane = control_plane
    pod = weather_pod(namespace, "weather-0")
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "example.com/weather-mcp:1.4"}]
    created = apply(plane, pod)
    for container in created["spec"]["containers"] + created["spec"]["initContainers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert {"NET_RAW", "ALL"} & set(security["capabilities"]["drop"]), container["name"]
    asking = weather_pod(namespace, "asking")
    asking["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    assert "allowPrivilegeEscalation is not false" in refused(plane, asking)
    raw = weather_pod(namespace, "raw")
    raw["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_RAW"]}}
    assert "capabilities.add (NET_RAW)" in refused(plane, raw)


async def test_a_pod_admitted_before_its_isolate_interface_is_never_verified(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle) -> None:
    """The real-node finding of issue 32: pods created in an opted-in namespace before their interface was
    applied were Ready and True/Verified in Isolate with no proxy, and their Service had no port to route to."""
    plane = control_plane
    early = apply(plane, weather_pod(namespace, "early"))
    [sidecar] = [c for c in early["spec"]["initContainers"] if c["name"] == "lockstep-sidecar"]
    assert "lockstep-mcp" not in [port["name"] for port in sidecar["ports"]]
    await pin(plane, namespace, mcp, enforcement="Isolate")
    late = apply(plane, weather_pod(namespace, "late"))  # the control: admitted with the interface in place
    await kubelet.start_pod(namespace, "early", {"server": None}, mcp_port=mcp.port)
    await kubelet.start_pod(namespace, "late", {"server": None}, mcp_port=mcp.port)
    assert late["metadata"]["name"] == "late"
    await eventually(lambda: condition(pod_of(plane, namespace, "late"), GATE) == "True", 30, "the control verified")
    reason = await eventually(lambda: _reason(plane, namespace, "early"), 30, "the early pod judged")
    assert reason == ("False", "ProxyMissing")


def _reason(plane: ControlPlane, namespace: str, name: str) -> tuple[str, str] | None:
    for entry in (pod_of(plane, namespace, name).get("status") or {}).get("conditions") or []:
        if entry["type"] == GATE:
            return (str(entry["status"]), str(entry["reason"]))
    return None


async def test_check_pods_names_a_service_past_the_proxy(control_plane: ControlPlane, lockstep: Installation,
                                                         namespace: str, mcp: McpServerHandle) -> None:
    plane = control_plane
    await pin(plane, namespace, mcp, enforcement="Isolate")
    apply(plane, weather_pod(namespace, "weather-0"))
    for name, target in (("weather", "lockstep-mcp"), ("second", 8081)):
        apply(plane, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                      "spec": {"selector": {"app": "weather"}, "ports": [{"port": 80, "targetPort": target}]}})
    result = lockstep_cli(plane, "check", "--pods", "-o", "json")
    checks = {item["name"]: item for item in json.loads(result.stdout)["checks"]}
    assert checks["services"]["status"] == "fail", checks["services"]
    assert f"{namespace}/second:8081 (weather)" in checks["services"]["message"]
    assert "weather:lockstep-mcp" not in checks["services"]["message"]
    assert result.returncode == 1
