"""The sidecar never holds its pod's termination, and retries when the operator says to.

On a real node a deleted pod took 11-33 s with the sidecar and 3 s without: the sidecar's open MCP
session kept uvicorn waiting for it (uvicorn waits for open connections without limit), and a native
sidecar is signalled only after the application has exited. And a new pod once waited 104 s for its
first verification behind eleven 503s (Retry-After: 1) from a standby replica, because the backoff
doubled to 30 s regardless of what the operator answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest
import uvicorn
from lockstep.sidecar.app import running_sidecar
from lockstep.sidecar.listener import is_listening, loopback_port, wait_until_closed
from lockstep.sidecar.reporter import next_retry
from lockstep.sidecar.settings import SidecarSettings
from lockstep_testing.loopback import Certificates, OperatorStandIn, sidecar_env
from lockstep_testing.mcp_servers import MutableServer, make_tools
from lockstep_testing.polling import eventually


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_the_application_exits_while_the_sidecar_holds_a_session(
        transport: str, operator: OperatorStandIn, certificates: Certificates, token_file: Path) -> None:
    server = MutableServer(tools=make_tools(2), list_changed=True)
    app, path = server.asgi_app(transport)
    # As an application's uvicorn runs by default: graceful shutdown waits for every open connection.
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                       timeout_graceful_shutdown=None))
    serving = asyncio.create_task(uv.serve())
    await eventually(lambda: uv.started, what="the MCP server")
    port = uv.servers[0].sockets[0].getsockname()[1]
    env = sidecar_env(f"http://127.0.0.1:{port}{path}", operator.url, certificates.ca_pem, token_file,
                      transport=transport, interval=3600)
    try:
        async with running_sidecar(SidecarSettings.from_env(env), host="127.0.0.1", max_report_backoff=0.5):
            await eventually(lambda: operator.reports, what="the first report")
            await eventually(lambda: server.sessions, what="the sidecar's open session")
            uv.should_exit = True  # SIGTERM to the application
            # Without the watch this never ends: the sidecar keeps its session open for list_changed.
            await asyncio.wait_for(asyncio.shield(serving), timeout=10)
    finally:
        if not serving.done():
            uv.force_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(serving, timeout=5)


async def test_the_watch_returns_when_the_port_stops_listening() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    assert is_listening(port) is True
    watch = asyncio.create_task(wait_until_closed(port, interval=0.01))
    await asyncio.sleep(0.05)
    assert not watch.done()
    listener.close()
    await asyncio.wait_for(watch, timeout=5)
    assert is_listening(port) is False


async def test_without_a_socket_table_the_watch_connects(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    missing = (tmp_path / "no-tcp",)
    assert is_listening(port, missing) is None
    watch = asyncio.create_task(wait_until_closed(port, interval=0.01, tables=missing))
    await asyncio.sleep(0.05)
    assert not watch.done()
    listener.close()
    await asyncio.wait_for(watch, timeout=5)


@pytest.mark.parametrize(("url", "port"), [
    ("http://127.0.0.1:8080/mcp", 8080), ("http://localhost/mcp", 80), ("http://[::1]:9/mcp", 9),
    ("http://weather.agents.svc:8080/mcp", None), ("http://10.0.0.7:8080/mcp", None)])
def test_only_a_server_in_this_pod_is_watched(url: str, port: int | None) -> None:
    assert loopback_port(url) == port


def test_retry_after_is_honoured_with_jitter_and_the_backoff_does_not_grow() -> None:
    backoff, waits = 0.5, []
    for _ in range(11):  # eleven 503s with Retry-After: 1 from a standby replica
        wait, backoff = next_retry(1.0, backoff, 30.0)
        waits.append(wait)
    assert all(1.0 <= wait <= 1.2 for wait in waits)
    assert sum(waits) < 14  # the pod is verified within seconds of the leader answering, not 104 s


def test_without_retry_after_the_backoff_doubles_to_its_cap() -> None:
    backoff, waits = 0.5, []
    for _ in range(10):
        wait, backoff = next_retry(0.0, backoff, 30.0)
        waits.append(wait)
    assert backoff == 30.0
    assert 15.0 <= waits[-1] <= 30.0 and waits[0] <= 0.5


async def test_a_server_that_starts_listening_is_connected_to_at_once() -> None:
    """The application starts after its native sidecar: the retry's sleep ends when the port listens."""
    from lockstep.sidecar.listener import sleep_until_listening

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    loop = asyncio.get_running_loop()
    started = loop.time()
    sleeping = asyncio.create_task(sleep_until_listening(port, 30.0, interval=0.01))
    await asyncio.sleep(0.1)
    assert not sleeping.done()
    probe.listen()
    await asyncio.wait_for(sleeping, timeout=5)  # not the 30 s of the backoff
    assert loop.time() - started < 10
    probe.close()


async def test_a_listening_or_remote_server_sleeps_the_whole_backoff() -> None:
    from lockstep.sidecar.listener import sleep_until_listening

    listener = socket.create_server(("127.0.0.1", 0))
    for port in (listener.getsockname()[1], None):  # refusing with a listener, or not in this pod
        sleeping = asyncio.create_task(sleep_until_listening(port, 0.3, interval=0.01))
        await asyncio.sleep(0.15)
        assert not sleeping.done()
        await asyncio.wait_for(sleeping, timeout=5)
    listener.close()


async def test_an_operator_outage_is_one_warning_not_one_per_retry(
        operator: OperatorStandIn, certificates: Certificates, token_file: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """While the API server is away the operator answers 503 to every retry: the sidecar's log says so
    once, and once more when a report gets through."""
    import logging

    from lockstep_testing.loopback import McpServerHandle

    operator.answers = [503] * 6
    handle = McpServerHandle(MutableServer(tools=make_tools(1)))
    caplog.set_level(logging.DEBUG, logger="lockstep.sidecar")
    async with handle.serving():
        env = sidecar_env(handle.url, operator.url, certificates.ca_pem, token_file, interval=3600)
        async with running_sidecar(SidecarSettings.from_env(env), host="127.0.0.1", max_report_backoff=0.05):
            await eventually(lambda: any("reached again" in r.getMessage() for r in caplog.records),
                             what="six refusals and a delivery")
    retries = [r for r in caplog.records if "will retry" in r.getMessage()]
    assert [r.levelname for r in retries].count("WARNING") == 1 and len(retries) == 6
    assert any("reached again after 6 failed attempts" in r.getMessage() for r in caplog.records)
