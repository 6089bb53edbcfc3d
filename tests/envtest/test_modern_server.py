"""A server that speaks only MCP 2026-07-28 (no initialize, list changes on subscriptions/listen only), on a
real control plane: its rug pull reaches the operator, and the pod leaves its Service, long before the
600 s probe timer."""

from __future__ import annotations

import copy

from lockstep_testing.cluster_objects import (
    GATE,
    POISON,
    TOOLS,
    condition,
    endpoint_ready,
    pin,
    pod_of,
    weather_pod,
    weather_service,
)
from lockstep.demo.control_plane import ControlPlane
from lockstep.demo.kubelet import Kubelet
from lockstep_testing.lockstep_install import Installation, apply
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.mcp_servers import MutableServer
from lockstep_testing.polling import eventually


async def test_a_2026_only_server_is_cut_out_on_its_listen_stream_not_the_timer(
        control_plane: ControlPlane, lockstep: Installation, kubelet: Kubelet, namespace: str) -> None:
    plane = control_plane
    server = MutableServer(tools=copy.deepcopy(TOOLS), instructions="Weather tools.", kinds=("tools",),
                           modern_only=True)
    handle = McpServerHandle(server)
    async with handle.serving():
        await pin(plane, namespace, handle)  # probe interval 600 s
        apply(plane, weather_service(namespace))
        apply(plane, weather_pod(namespace, "weather-0"))
        pod = await kubelet.start_pod(namespace, "weather-0", {"server": None}, mcp_port=handle.port)
        await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "True", 30, "verified")
        await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is True, 30, "in the Service")
        await eventually(lambda: server.listeners >= 1, 30, "the sidecar's subscriptions/listen stream")

        server.update_tool("get_alerts", description=POISON)
        assert await server.notify("tools") >= 1
        await eventually(lambda: condition(pod_of(plane, namespace, "weather-0"), GATE) == "False", 30, "drift")
        await eventually(lambda: endpoint_ready(plane, namespace, "weather", pod.ip) is False, 30, "out")
        # (30 s guards, against a 600 s timer: only the listen stream can explain the verdict)
