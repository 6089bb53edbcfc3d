"""``lockstep sidecar`` as the container runs it: a separate process configured by its environment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from lockstep_testing.loopback import Certificates, McpServerHandle, OperatorStandIn, sidecar_env
from lockstep_testing.polling import eventually


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def sidecar_process(env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lockstep.cli", "sidecar", env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def healthz(port: int) -> int:
    try:
        async with httpx2.AsyncClient() as client:
            return (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code
    except httpx2.HTTPError:
        return 0


async def test_command_reports_serves_health_and_stops_on_sigterm(
        mcp: McpServerHandle, operator: OperatorStandIn, certificates: Certificates, token_file: Path) -> None:
    port = free_port()
    env = sidecar_env(mcp.url, operator.url, certificates.ca_pem, token_file, LOCKSTEP_SIDECAR_PORT=str(port))
    async with sidecar_process(env) as process:
        await eventually(lambda: operator.reports or process.returncode is not None, timeout=30,
                         what="the first report")
        assert process.returncode is None
        assert operator.reports[0].failure is None and operator.reports[0].digest
        assert await healthz(port) == 200
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0


async def test_unusable_settings_keep_the_container_alive_and_say_why(token_file: Path) -> None:
    port = free_port()
    env = {"LOCKSTEP_SIDECAR_PORT": str(port), "LOCKSTEP_MCP_TRANSPORT": "carrier-pigeon",
           "LOCKSTEP_TOKEN_PATH": str(token_file)}
    async with sidecar_process(env) as process:
        health = 0
        async with asyncio.timeout(30):
            while health != 200 and process.returncode is None:
                await asyncio.sleep(0.05)
                health = await healthz(port)
        assert health == 200  # alive, so the kubelet does not restart-loop it; the pod stays unverified
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
        assert process.stderr is not None
        assert b"LOCKSTEP_MCP_TRANSPORT" in await process.stderr.read()


async def test_a_proxy_port_taken_on_ipv6_makes_the_process_exit_without_reporting(
        mcp: McpServerHandle, operator: OperatorStandIn, certificates: Certificates, token_file: Path) -> None:
    """The application bound [::]:<proxy port> (IPv6 only) before the sidecar: IPv6 agents would reach it. The
    sidecar exits (status 1, the container restarts) instead of serving IPv4 alone; the pod is never Ready."""
    try:
        squat = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        pytest.skip("this host has no IPv6")
    with squat:
        squat.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            squat.bind(("::", 0))
        except OSError:
            pytest.skip("this host has no IPv6")
        squat.listen()
        port = squat.getsockname()[1]
        env = sidecar_env(mcp.url, operator.url, certificates.ca_pem, token_file, LOCKSTEP_SIDECAR_PORT=str(free_port()),
                          LOCKSTEP_PROXY_PORT=str(port), LOCKSTEP_PROXY_MODE="isolate")
        async with sidecar_process(env) as process:
            assert await asyncio.wait_for(process.wait(), 30) == 1
            assert process.stderr is not None
            assert b"The in-line proxy cannot listen" in await process.stderr.read()
    assert operator.reports == []
