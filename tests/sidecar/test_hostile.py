"""The sidecar against servers that misbehave on the wire (a hand-written JSON-RPC server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lockstep.sidecar.app import running_sidecar
from lockstep.sidecar.settings import SidecarSettings
from lockstep_testing.loopback import Certificates, OperatorStandIn, eventually, sidecar_env
from lockstep_testing.mcp_servers import HostileServer, serve_mcp

TOOLS = {"tools": [{"name": "get_forecast", "inputSchema": {"type": "object"}}]}


@pytest.fixture
def hostile() -> HostileServer:
    return HostileServer(answers={"tools/list": TOOLS})


@pytest.fixture
async def url(hostile: HostileServer) -> AsyncIterator[str]:
    async with serve_mcp(hostile) as served:
        yield served


def settings(url: str, operator: OperatorStandIn, certificates: Certificates, token_file: Path,
             interval: float) -> SidecarSettings:
    return SidecarSettings.from_env(sidecar_env(url, operator.url, certificates.ca_pem, token_file, interval=interval))


async def test_server_without_a_notification_stream_is_not_reconnected_in_a_loop(
        url: str, hostile: HostileServer, operator: OperatorStandIn, certificates: Certificates,
        token_file: Path) -> None:
    async with running_sidecar(settings(url, operator, certificates, token_file, 3600), host="127.0.0.1"):
        await eventually(lambda: operator.reports, what="the first report")
        await asyncio.sleep(1.0)  # a reconnect loop would initialize again and again meanwhile
    assert operator.reports[0].failure is None
    assert hostile.methods.count("initialize") == 1
    assert hostile.methods.count("tools/list") == 1


async def test_garbage_list_is_reported_invalid(
        url: str, hostile: HostileServer, operator: OperatorStandIn, certificates: Certificates,
        token_file: Path) -> None:
    hostile.answers["tools/list"] = '{"tools": {"not": "a list"}}'
    async with running_sidecar(settings(url, operator, certificates, token_file, 3600), host="127.0.0.1"):
        await eventually(lambda: operator.reports, what="a report")
    assert operator.reports[0].failure == "InterfaceInvalid"


async def test_server_refusing_every_request_is_reported_unreachable_after_the_grace_period(
        url: str, hostile: HostileServer, operator: OperatorStandIn, certificates: Certificates,
        token_file: Path) -> None:
    hostile.status = 401
    async with running_sidecar(settings(url, operator, certificates, token_file, 0.5), host="127.0.0.1"):
        await eventually(lambda: operator.reports, what="a report")
    assert operator.reports[0].failure == "ServerUnreachable"
    assert "401" in operator.reports[0].body["failure"]["message"]
