"""The sidecar against servers that misbehave on the wire (a hand-written JSON-RPC server)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lockstep import reader
from lockstep.sidecar.app import running_sidecar
from lockstep.sidecar.settings import SidecarSettings
from lockstep_testing.loopback import Certificates, OperatorStandIn, sidecar_env
from lockstep_testing.mcp_servers import HostileServer, serve_mcp
from lockstep_testing.polling import eventually

#: The MCP SDK's streamable HTTP client: it retries the notification stream's GET once, then logs this and stops.
SDK_TRANSPORT_LOGGER = "mcp.client.streamable_http"
GAVE_UP_ON_THE_STREAM = "GET stream max reconnection attempts"

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
        token_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A server that answers the notification stream's GET with 405 keeps its one session: after the SDK
    gives up on the stream (its second 405), a list_changed still wakes a probe of that same session."""
    caplog.set_level(logging.DEBUG, logger=SDK_TRANSPORT_LOGGER)
    wake_ups: list[Callable[[str], Any]] = []

    def connect(*args: Any, on_list_changed: Callable[[str], Any], **kwargs: Any) -> Any:
        wake_ups.append(on_list_changed)  # the prober's: what a notifications/tools/list_changed would call
        return reader.connect(*args, on_list_changed=on_list_changed, **kwargs)

    async with running_sidecar(settings(url, operator, certificates, token_file, 3600), host="127.0.0.1",
                               connect=connect):
        await eventually(lambda: operator.reports, what="the first report")
        # The last thing the missing stream causes: the SDK's last GET answered 405 (a reader that took it for
        # a drop would have marked the session dropped by then, and reconnected 0.1 s later).
        await eventually(lambda: hostile.methods.count("initialize") > 1
                         or any(GAVE_UP_ON_THE_STREAM in record.getMessage() for record in caplog.records),
                         what="the SDK giving up on the notification stream (its GETs answered 405)")
        assert hostile.methods.count("initialize") == 1, "a new session while the SDK still tried the stream"
        wake_ups[-1]("tools")
        # A probe on the same session answers it; after a drop it would come from a new session (a second
        # initialize), since a dropped session is never probed again.
        await eventually(lambda: hostile.methods.count("tools/list") >= 2, what="the probe the wake-up asked for")
    assert operator.reports[0].failure is None
    assert hostile.methods.count("initialize") == 1 and len(wake_ups) == 1
    assert hostile.methods.count("tools/list") == 2


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
