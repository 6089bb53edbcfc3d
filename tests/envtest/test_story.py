"""The whole Lockstep loop on a real control plane, with real parts: the API server's admission chain
calls the operator's webhook, the sidecar runs as its own process with a pod-bound token, the operator
runs under the chart's ServiceAccount, and the EndpointSlice controller takes the pod in and out of its
Service as the kubelet stand-in recomputes Ready from the readiness gate.

    verified -> Ready -> ready in the EndpointSlice
    rug pull + list_changed -> condition False -> not ready in the EndpointSlice
    lockstep diff -> lockstep approve --apply -> back in the EndpointSlice

Enforcement Isolate puts the sidecar's in-line proxy on the agents' path (issue 28): the servers listen on
127.0.0.1 and the Service targets lockstep-mcp; a server that answers on the pod's IP is judged ServerExposed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lockstep_testing.cluster_objects import (
    GATE,
    POISON,
    condition,
    endpoint_ready,
    lockstep_cli,
    pin,
    pod_of,
    weather_pod,
    weather_service,
)
from lockstep.demo.control_plane import ControlPlane, free_port
from lockstep.demo.kubelet import Kubelet, PodProcess, RunningPod
from lockstep_testing.lockstep_install import Installation, api_path, apply
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.polling import eventually

WEATHER_SERVER = Path(__file__).resolve().parents[2] / "examples" / "weather_server.py"


async def start_weather_pod(plane: ControlPlane, kubelet: Kubelet, namespace: str, name: str,
                            mcp: McpServerHandle) -> RunningPod:
    created = apply(plane, weather_pod(namespace, name))
    return await kubelet.start_pod(namespace, created["metadata"]["name"], {"server": None}, mcp_port=mcp.port)


async def test_injected_verified_isolated_approved_and_back(control_plane: ControlPlane, lockstep: Installation,
                                                            kubelet: Kubelet, namespace: str,
                                                            mcp: McpServerHandle) -> None:
    plane = control_plane
    await pin(plane, namespace, mcp)
    apply(plane, weather_service(namespace))
    created = apply(plane, weather_pod(namespace, "weather-0"))

    # The real admission chain called the webhook: sidecar, gate, token volume. The service-account
    # plugin ran after it and mounted the API token into the application only.
    spec = created["spec"]
    [sidecar] = [c for c in spec["initContainers"] if c["name"] == "lockstep-sidecar"]
    assert {"conditionType": GATE} in spec["readinessGates"]
    api_token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    sidecar_mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    assert sidecar_mounts[api_token_path] == "lockstep-no-api-token"
    [server] = spec["containers"]
    assert any(m["name"].startswith("kube-api-access") for m in server["volumeMounts"]
               if m["mountPath"] == api_token_path)

    pod = await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=mcp.port)
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified")
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), "Ready") == "True", 10, "Ready")
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is True, 30, "in the Service")

    # Rug pull, announced by list_changed: the verdict flips long before the 600 s timer.
    mcp.server.update_tool("get_alerts", description=POISON)
    assert await mcp.server.notify("tools") >= 1
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "False", 30, "drift")
    assert condition(pod_of(plane, namespace, "weather-0"), "Ready") == "False" or await eventually(
        lambda: condition(pod_of(plane, namespace, "weather-0"), "Ready") == "False", 10, "NotReady")
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is False, 30, "out of the Service")
    drifted = [e for e in plane.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
               if e["involvedObject"].get("name") == "weather-0" and e["involvedObject"].get("kind") == "Pod"]
    assert any(e["involvedObject"].get("uid") == pod.uid for e in drifted), drifted

    diff = lockstep_cli(plane, "diff", "weather", "-n", namespace)
    assert diff.returncode == 1, diff.stderr
    assert "get_alerts" in diff.stdout and "IMPORTANT" in diff.stdout

    approve = lockstep_cli(plane, "approve", "weather", "-n", namespace, "--apply")
    assert approve.returncode == 0, approve.stderr
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "re-judged")
    await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is True, 30, "back in the Service")
    assert lockstep_cli(plane, "diff", "weather", "-n", namespace).returncode == 0


async def test_a_second_pod_of_the_same_interface_is_verified_on_its_own(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        mcp: McpServerHandle) -> None:
    plane = control_plane
    await pin(plane, namespace, mcp)
    first = await start_weather_pod(plane, kubelet, namespace, "weather-a", mcp)
    second = await start_weather_pod(plane, kubelet, namespace, "weather-b", mcp)
    for pod in (first, second):
        await eventually(lambda pod=pod: condition(pod_of(plane, namespace, pod.name), GATE) == "True", 30,
                         f"{pod.name} verified")
    await eventually(lambda: plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))
                     .get("status", {}).get("phase") == "Verified", 10, "phase Verified")
    status = plane.call("GET", api_path("MCPServerInterface", namespace, "weather"))["status"]
    [observed] = status["observed"]  # both pods serve one revision
    assert sorted(observed["pods"]) == ["weather-a", "weather-b"]


async def test_a_server_that_answers_on_the_pods_ip_is_judged_exposed(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str) -> None:
    """Issue 28: in Isolate agents may reach the server only through the in-line proxy. The example server
    listening on every address answers on the pod's IP (the kubelet stand-in's downward-API podIP): the
    sidecar reports it, the operator judges the pod False, ServerExposed, and it never joins its Service."""
    plane, port = control_plane, free_port()
    apply(plane, {"apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
                  "metadata": {"name": "weather", "namespace": namespace},
                  "spec": {"selector": {"matchLabels": {"app": "weather"}},
                           "endpoint": {"port": port, "path": "/mcp", "transport": "streamable-http"},
                           "enforcement": "Isolate", "approval": "FirstSeen",
                           "probe": {"interval": "600s", "timeout": "5s"}}})
    apply(plane, weather_service(namespace))
    apply(plane, weather_pod(namespace, "weather-0"))
    exposed = PodProcess([sys.executable, str(WEATHER_SERVER), "--host", "0.0.0.0", "--port", str(port)])
    pod = await kubelet.start_pod(namespace, "weather-0", {"server": exposed}, mcp_port=port)
    verdict = await eventually(lambda: _gate(pod_of(plane, namespace, "weather-0")).get("reason") == "ServerExposed"
                               and _gate(pod_of(plane, namespace, "weather-0")), 30, "judged ServerExposed")
    assert verdict["status"] == "False"
    assert f"{pod.local_ip}:{port}" in verdict["message"] and "127.0.0.1" in verdict["message"]
    assert condition(pod_of(plane, namespace, "weather-0"), "Ready") == "False"
    assert endpoint_ready(plane, namespace, "weather", pod.ip) is not True


def _gate(pod: dict[str, Any]) -> dict[str, Any]:
    return next((dict(entry) for entry in (pod.get("status") or {}).get("conditions") or []
                 if entry["type"] == GATE), {})
