"""The whole Lockstep loop on a real control plane, with real parts: the API server's admission chain
calls the operator's webhook, the sidecar runs as its own process with a pod-bound token, the operator
runs under the chart's ServiceAccount, and the EndpointSlice controller takes the pod in and out of its
Service as the kubelet stand-in recomputes Ready from the readiness gate.

    verified -> Ready -> ready in the EndpointSlice
    rug pull + list_changed -> condition False -> not ready in the EndpointSlice
    lockstep diff -> lockstep approve --apply -> back in the EndpointSlice
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator

import pytest
from lockstep_testing.cluster_objects import (
    GATE,
    POISON,
    TOOLS,
    condition,
    endpoint_ready,
    lockstep_cli,
    pin,
    pod_of,
    weather_pod,
    weather_service,
)
from lockstep_testing.control_plane import ControlPlane
from lockstep_testing.kubelet import Kubelet, RunningPod
from lockstep_testing.lockstep_install import Installation, api_path, apply
from lockstep_testing.loopback import McpServerHandle, eventually
from lockstep_testing.mcp_servers import MutableServer


@pytest.fixture
async def mcp() -> AsyncIterator[McpServerHandle]:
    handle = McpServerHandle(MutableServer(tools=copy.deepcopy(TOOLS), instructions="Weather tools.",
                                           kinds=("tools",)))
    async with handle.serving():
        yield handle


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
