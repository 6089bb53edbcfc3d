"""Support for the approval-flow tests: a cluster emulated by kmock behind a real kubeconfig, the example
weather server (lockstep/demo/weather_server.py) read live, and MCPServerInterface status built by the
operator's own judging and status code from those real observations."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from lockstep.operator.cache import PodRecord
from lockstep.operator.judge import Policy, judge
from lockstep.operator.state import PodTrack, ResourceMemory
from lockstep.operator.status import build_status

from lockstep.cli import cli
from lockstep.core import Interface
from lockstep.core.manifest import build_manifest
from lockstep.core.report import Observation
from lockstep.core.revision import Revision
from lockstep.reader import read_interface
from lockstep.demo import weather_server as weather
from lockstep_testing.mcp_servers import serve_mcp

NAMESPACE = "agents"
NAME = "weather"
CRD_RESOURCE = "lockstep.dev/v1alpha1/mcpserverinterfaces"


def delete_station(code: str) -> str:
    return f"deleted {code}"


def add_a_tool(server: Any) -> None:
    """A release that ships a new, destructive tool."""
    from mcp.types import ToolAnnotations

    server.add_tool(delete_station, description="Delete a weather station by its code.",
                    annotations=ToolAnnotations(destructiveHint=True))


def remove_a_tool(server: Any) -> None:
    server.remove_tool("get_alerts")


def hide_a_character(server: Any) -> None:
    """A description that gains a zero-width space: invisible in a browser, visible in review."""
    server.remove_tool("get_alerts")
    server.add_tool(weather.get_alerts, description="Active weather alerts\u200b for a US state (two-letter code).")


async def read_weather(*changes: Callable[[Any], None]) -> Interface:
    """The live interface of the example weather server after ``changes`` (a rug pull, a new tool)."""
    server = weather.build_server()
    for change in changes:
        change(server)
    async with serve_mcp(server) as url:
        return (await read_interface(url, timeout=10)).interface


def interface_manifest(approved: Interface | list[Interface], *, ignore: list[str] | None = None) -> dict[str, Any]:
    revisions = [Revision.of(item, ignore) for item in (approved if isinstance(approved, list) else [approved])]
    manifest = build_manifest(revisions[0], name=NAME, namespace=NAMESPACE, selector={"app": "weather-mcp"},
                              ignore=ignore)
    manifest["spec"]["approved"] = [revision.to_spec() for revision in revisions]
    return manifest


def with_status(manifest: Mapping[str, Any], served: Mapping[str, Interface], *,
                definitions_limit: int = 64 * 1024) -> dict[str, Any]:
    """The resource as the cluster holds it, its status built by the operator's judge and status code
    from the observations of ``served`` (pod name -> the interface that pod serves)."""
    resource = json.loads(json.dumps(manifest))
    resource["metadata"].update(uid="5f0c1a2e-0000-4000-8000-00000000000b", resourceVersion="41", generation=2,
                                creationTimestamp="2026-11-22T01:00:00Z")
    policy = Policy.from_resource(resource)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = []
    for index, (pod_name, interface) in enumerate(served.items()):
        uid = f"0d7c6b5a-0000-4000-8000-{index:012d}"
        record = PodRecord(NAMESPACE, pod_name, uid, {"app": "weather-mcp"}, {}, [])
        observation = Observation.of_interface(interface, now)
        pods.append((record, PodTrack(uid, observation, verdict=judge(observation, policy))))
    resource["status"] = build_status(policy, pods, ResourceMemory(), {}, definitions_limit=definitions_limit)
    return resource


@dataclass
class Cluster:
    """kmock as the API server, and a kubeconfig that points the `kubernetes` client at it."""

    emulator: Any
    kubeconfig: Path

    async def put(self, resource: Mapping[str, Any]) -> None:
        metadata = resource["metadata"]
        self.emulator.objects[CRD_RESOURCE, metadata["namespace"], metadata["name"]] = json.loads(json.dumps(resource))

    def get(self, name: str = NAME, namespace: str = NAMESPACE) -> dict[str, Any]:
        return json.loads(json.dumps(dict(self.emulator.objects[CRD_RESOURCE, namespace, name]), default=dict))

    def patches(self) -> list[Any]:
        return list(self.emulator["patch", self.emulator.resource(CRD_RESOURCE)])

    async def lockstep(self, *args: str) -> Result:
        """Run the CLI against this cluster on a worker thread (the emulator answers on this loop)."""
        arguments = [*args, "--kubeconfig", str(self.kubeconfig)]
        return await asyncio.to_thread(CliRunner().invoke, cli, arguments, catch_exceptions=False)


def make_cluster(emulator: Any, folder: Path) -> Cluster:
    from lockstep_testing.kmock_support import declare_resources

    declare_resources(emulator)  # without it kmock serves the CRD with no verbs and namespaced=None
    return Cluster(emulator, write_kubeconfig(emulator, folder))


def write_kubeconfig(emulator: Any, folder: Path) -> Path:
    """A kubeconfig whose current context (namespace agents) points the `kubernetes` client at kmock."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": str(emulator.url).rstrip("/")}}],
        "users": [{"name": "reviewer", "user": {"token": "reviewer-token"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "reviewer", "namespace": NAMESPACE}}],
    }))
    return kubeconfig
