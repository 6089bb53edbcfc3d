"""Enforcement Quarantine on a real control plane: the sidecar runs as the in-line proxy, a server that
shows the probe a clean face gets no poisoned component to an agent, the withheld component reaches the
resource's status and Events, a Service that targets the server's port directly (or any port but the proxy's
and the sidecar's own) is reported, and the EndpointSlice controller resolves the proxy's named port
lockstep-mcp on the native sidecar.

The kubelet stand-in runs every pod's processes on the host's loopback, each pod's proxy on a free port of
its own (``RunningPod.proxy_port``; the pod's spec keeps the port the resource names), so the agent reaches
the proxy at 127.0.0.1 on that port.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lockstep_testing.cluster_objects import GATE, POISON, TOOLS, condition, pin, pod_of, weather_pod
from lockstep.demo.control_plane import ControlPlane, free_port
from lockstep.demo.kubelet import Kubelet
from lockstep_testing.lockstep_install import Installation, api_path, apply
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.mcp_servers import MutableServer, split_view_server
from lockstep_testing.polling import eventually
from lockstep_testing.proxy_support import agent_read


@pytest.fixture
async def split_view() -> AsyncIterator[McpServerHandle]:
    server = split_view_server(TOOLS, poisoned="get_alerts", text=POISON, instructions="Weather tools.",
                               kinds=("tools",))
    handle = McpServerHandle(server)
    async with handle.serving():
        yield handle


def service(namespace: str, name: str, target: int | str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"app": "weather"}, "ports": [{"name": "mcp", "port": 80, "targetPort": target}]}}


def interface(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    return dict(plane.call("GET", api_path("MCPServerInterface", namespace, "weather")))


def events(plane: ControlPlane, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = plane.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [event for event in items if event.get("reason") == reason]


def slice_ports(plane: ControlPlane, namespace: str, name: str) -> list[int]:
    slices = plane.call("GET", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                               f"?labelSelector=kubernetes.io%2Fservice-name%3D{name}")
    return [port["port"] for item in slices["items"] for port in item.get("ports") or []]


async def test_the_proxy_keeps_a_split_view_server_from_poisoning_agents(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str,
        split_view: McpServerHandle) -> None:
    plane, proxy_port = control_plane, free_port()
    await pin(plane, namespace, split_view, enforcement="Quarantine", proxy={"port": proxy_port})
    apply(plane, service(namespace, "weather", "lockstep-mcp"))  # through the proxy
    # Past it: the MCP endpoint's port (spec.endpoint.port; the stand-in's server listens on it), and since
    # security review 2 (S6-4) any port but the proxy's and the sidecar's own (9090, lockstep-http: its metrics).
    apply(plane, service(namespace, "weather-direct", split_view.port))
    apply(plane, service(namespace, "weather-metrics", 9090))

    created = apply(plane, weather_pod(namespace, "weather-0"))
    [sidecar] = [c for c in created["spec"]["initContainers"] if c["name"] == "lockstep-sidecar"]
    assert {"name": "lockstep-mcp", "containerPort": proxy_port, "protocol": "TCP"} in sidecar["ports"]
    assert {"name": "LOCKSTEP_PROXY_PORT", "value": str(proxy_port)} in sidecar["env"]

    running = await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=split_view.port)
    await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified")
    # The EndpointSlice controller resolved the named port on the native sidecar: the Service reaches the proxy.
    await eventually(lambda: slice_ports(plane, namespace, "weather") == [proxy_port], 30, "the proxy's port")

    direct = await agent_read(split_view.url, client_name="claude-code")
    assert "<IMPORTANT>" in direct.raw  # what the probe never sees
    seen = await agent_read(f"http://127.0.0.1:{running.proxy_port}/mcp", client_name="claude-code",
                            call="get_alerts")
    assert [tool.name for tool in seen.tools] == ["get_forecast"] and "<IMPORTANT>" not in seen.raw
    assert seen.call_error is not None and "withheld by lockstep" in seen.call_error.message
    assert split_view.server.tool_calls == []

    status = await eventually(lambda: (interface(plane, namespace).get("status") or {}).get("proxy", {})
                              .get("withheld") and interface(plane, namespace)["status"], 30, "withheld in status")
    entry = next(e for e in status["proxy"]["withheld"] if e["action"] == "withheld")
    assert (entry["component"], entry["reason"], entry["client"], entry["pod"]) == (
        "tool/get_alerts", "Changed", "claude-code", "weather-0")
    assert events(plane, namespace, "ComponentWithheld")
    direct = f"weather-direct:{split_view.port}"
    assert status["proxy"]["bypassingServices"] == [direct]
    bypassed = next(c for c in status["conditions"] if c["type"] == "ProxyBypassed")
    assert bypassed["status"] == "True" and direct in bypassed["message"]
    [warning] = events(plane, namespace, "ServiceBypassesProxy")
    assert direct in warning["message"]


async def test_a_drifted_pod_keeps_serving_the_approved_subset(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str) -> None:
    plane, proxy_port = control_plane, free_port()
    handle = McpServerHandle(MutableServer(tools=copy.deepcopy(TOOLS), kinds=("tools",)))
    async with handle.serving():
        await pin(plane, namespace, handle, enforcement="Quarantine", proxy={"port": proxy_port})
        apply(plane, weather_pod(namespace, "weather-0"))
        running = await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=handle.port)
        await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified")

        handle.server.update_tool("get_alerts", description=POISON)  # a rug pull the probe sees too
        assert await handle.server.notify("tools") >= 1
        pod = await eventually(lambda: _reason(pod_of(plane, namespace, "weather-0")) == "Quarantined"
                               and pod_of(plane, namespace, "weather-0"), 30, "quarantined")
        seen = await agent_read(f"http://127.0.0.1:{running.proxy_port}/mcp", client_name="cursor")
    assert condition(pod, GATE) == "True" and condition(pod, "Ready") == "True"  # still in its Services
    assert [tool.name for tool in seen.tools] == ["get_forecast"] and "<IMPORTANT>" not in seen.raw
    status = await eventually(lambda: interface(plane, namespace)["status"]["pods"].get("quarantined") == 1
                              and interface(plane, namespace)["status"], 30, "the quarantined count")
    assert status["phase"] == "Drifted"
    assert next(c for c in status["conditions"] if c["type"] == "ProxyBypassed")["status"] == "False"


def _reason(pod: dict[str, Any]) -> str | None:
    for entry in (pod.get("status") or {}).get("conditions") or []:
        if entry["type"] == GATE:
            return str(entry.get("reason"))
    return None
