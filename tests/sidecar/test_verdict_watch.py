"""An approval that narrows while the pod serves reaches its proxy through the verdict watch, not at the next
report (issue 32 item 3, S6-7): kmock as the API server, the real operator, the webhook-injected sidecar, a real
MCP server. The probe interval is 60 s; the test shows that no report was delivered between the change and the
proxy acting on it, so the watch carried it."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lockstep_testing.cluster_objects import TOOLS
from lockstep_testing.kmock_support import Emulator
from lockstep_testing.lockstep_cluster import (
    NAMESPACE,
    Cluster,
    application_pod,
    interface_resource,
    lockstep_cluster,
    start_pod,
)
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.polling import eventually
from lockstep_testing.proxy_support import agent_read
from lockstep_testing.weather_mcp import weather_mcp  # noqa: F401  (the fixture mcp: the weather tools)

from lockstep import reader
from lockstep.core.model import Interface
from lockstep.core.revision import Revision
from lockstep.core.wire import VERDICTS_PATH

pytestmark = pytest.mark.kmock(cls=Emulator)

RESOURCE = f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces"


@pytest.fixture
async def cluster(kmock: Emulator, tmp_path: Path) -> AsyncIterator[Cluster]:
    async with lockstep_cluster(kmock, tmp_path) as running:
        yield running


def changed_revision(served: Revision) -> Revision:
    """Another version of the server: one tool's description differs."""
    document = {"instructions": "Weather tools.", "tools": copy.deepcopy(TOOLS)}
    document["tools"][0]["description"] += " (v2)"
    return Revision.of(Interface.from_document(document))


async def approve(cluster: Cluster, revisions: list[Revision]) -> None:
    patch = {"spec": {"approved": [revision.to_spec() for revision in revisions]}}
    async with cluster.api.patch(f"{RESOURCE}/weather", json=patch,
                                 headers={"Content-Type": "application/merge-patch+json"}) as answer:
        assert answer.status < 300


async def serving_pod(cluster: Cluster, mcp: McpServerHandle, enforcement: str) -> tuple[Revision, dict[str, Any]]:
    served = Revision.of((await reader.read_interface(mcp.url)).interface)
    resource = interface_resource(served, mcp)
    resource["spec"]["enforcement"] = enforcement
    resource["spec"]["approved"] = [served.to_spec(), changed_revision(served).to_spec()]  # a rolling update
    await cluster.create(RESOURCE, resource)
    return served, await cluster.admit(application_pod("weather-0"))


@pytest.mark.parametrize("enforcement", ["Isolate", "Quarantine"])
async def test_a_revision_removed_while_the_pod_serves_reaches_the_proxy_through_the_watch(
        cluster: Cluster, mcp: McpServerHandle, tmp_path: Path, enforcement: str) -> None:
    served, pod = await serving_pod(cluster, mcp, enforcement)
    async with start_pod(cluster, pod, tmp_path) as sidecar:
        proxy = sidecar.proxy
        assert proxy is not None
        url = f"http://127.0.0.1:{proxy.listen_port}/mcp"
        await eventually(lambda: sidecar.reporter.last_delivery and proxy.isolated is None, what="the pod verified")
        assert [tool.name for tool in (await agent_read(url)).tools] == ["get_forecast", "get_alerts"]
        delivered, gate = sidecar.reporter.last_delivery, proxy.policy.gate

        await approve(cluster, [changed_revision(served)])  # the old version's revision is pruned

        if enforcement == "Isolate":
            await eventually(lambda: proxy.isolated, what="the proxy to isolate")
            with pytest.raises(Exception, match="isolated by Lockstep"):
                await agent_read(url)
        else:
            await eventually(lambda: proxy.policy.gate is not gate, what="the proxy's gate to be replaced")
            assert [tool.name for tool in (await agent_read(url)).tools] == ["get_alerts"]
        assert sidecar.reporter.last_delivery is delivered  # no report carried it: the watch did


async def test_the_watch_is_authenticated_as_reports_are_and_bounded_per_pod(
        cluster: Cluster, mcp: McpServerHandle, tmp_path: Path) -> None:
    _, pod = await serving_pod(cluster, mcp, "Isolate")
    async with start_pod(cluster, pod, tmp_path) as sidecar:
        assert sidecar.watcher is not None
        await eventually(lambda: sidecar.watcher.notices, what="the sidecar's watch")  # type: ignore[union-attr]
        verify = sidecar_tls(cluster)
        url = f"{cluster.config.report_url}{VERDICTS_PATH}"
        async with httpx2.AsyncClient(verify=verify, timeout=httpx2.Timeout(10)) as http:
            assert (await http.get(url)).status_code == 401  # no token
            forged = cluster.tokens.issue(NAMESPACE, "weather-0", "uid-other")  # a token of another pod of that name
            refused = await http.get(url, headers={"Authorization": f"Bearer {forged}"})
            assert (refused.status_code, refused.json()["reason"]) == (403, "UidMismatch")
            stray = cluster.tokens.issue(NAMESPACE, "stray-0", "uid-stray-0")
            assert (await http.get(url, headers={"Authorization": f"Bearer {stray}"})).json()["reason"] == "UnknownPod"
            token = (tmp_path / "weather-0.token").read_text()
            # The sidecar holds one watch; a second is allowed, a third is refused (the etag never matches: each
            # would be answered at once, so they are held with the sidecar's own etag instead).
            since = {"since": sidecar.watcher.etag or ""}
            pending = asyncio.create_task(http.get(url, headers={"Authorization": f"Bearer {token}"}, params=since))
            await eventually(lambda: cluster.operator.operator.report_server.verdicts._open.get(  # type: ignore[union-attr]
                (NAMESPACE, "weather-0")) == 2, what="two open watches")
            third = await http.get(url, headers={"Authorization": f"Bearer {token}"}, params=since)
            assert (third.status_code, third.json()["reason"]) == (429, "RateLimited")
            pending.cancel()


def sidecar_tls(cluster: Cluster) -> Any:
    from lockstep.sidecar.settings import SidecarSettings

    return SidecarSettings.from_env({"LOCKSTEP_OPERATOR_URL": "https://x",
                                     "LOCKSTEP_OPERATOR_CA": cluster.certificates.ca_pem}).ssl_context()


async def test_the_interface_deleted_while_the_pod_serves_isolates_the_proxy_through_the_watch(
        cluster: Cluster, mcp: McpServerHandle, tmp_path: Path) -> None:
    """No interface selects the pod any more: the operator writes False, and the pod's watch is refused 403
    NotSelected (the same refusal as a report's), which isolates the proxy."""
    _, pod = await serving_pod(cluster, mcp, "Isolate")
    async with start_pod(cluster, pod, tmp_path) as sidecar:
        proxy = sidecar.proxy
        assert proxy is not None
        await eventually(lambda: sidecar.reporter.last_delivery and proxy.isolated is None, what="the pod verified")
        delivered = sidecar.reporter.last_delivery
        async with cluster.api.delete(f"{RESOURCE}/weather") as answer:
            assert answer.status < 300
        await eventually(lambda: proxy.isolated == "NotSelected", what="the proxy to isolate")
        assert sidecar.reporter.last_delivery is delivered
