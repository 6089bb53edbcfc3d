"""The sidecar against servers that misbehave on the wire (a hand-written JSON-RPC server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lockstep.sidecar.app import running_sidecar
from lockstep.sidecar.settings import SidecarSettings
from lockstep_testing.loopback import Certificates, OperatorStandIn, sidecar_env
from lockstep_testing.mcp_servers import HostileServer, serve_mcp
from lockstep_testing.polling import eventually

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
        # Still a fixed wait: the sidecar gives no signal that it is past deciding to reconnect (a timer
        # probe every 0.2 s as that signal met a legitimate second session under load).
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


@dataclass
class ForgetfulServer:
    """Answers the notification stream's GET with 404, as a server that no longer knows the session."""

    inner: HostileServer

    def asgi_app(self, transport: Any) -> tuple[Any, str]:
        app, path = self.inner.asgi_app(transport)

        async def forgetful(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["method"] == "GET":
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            await app(scope, receive, send)

        return forgetful, path


async def test_session_that_drops_at_once_is_reopened_with_backoff(
        hostile: HostileServer, operator: OperatorStandIn, certificates: Certificates, token_file: Path) -> None:
    async with (serve_mcp(ForgetfulServer(hostile)) as url,
                running_sidecar(settings(url, operator, certificates, token_file, 3600), host="127.0.0.1")):
        await eventually(lambda: operator.reports, what="the first report")
        first = time.monotonic()
        await eventually(lambda: hostile.methods.count("initialize") >= 3, what="two reconnects")
        waited = time.monotonic() - first
    assert operator.reports[0].failure is None
    assert waited >= 0.1 + 0.2 - 0.05  # reconnects, backing off from 0.1 s (not in a tight loop)
