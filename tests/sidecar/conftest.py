"""Fixtures: a real MCP server and an HTTPS stand-in for the operator's report endpoint, on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lockstep_testing.loopback import Certificates, McpServerHandle, OperatorStandIn, make_certificates
from lockstep_testing.mcp_servers import MutableServer, make_tools


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path)


@pytest.fixture
async def operator(certificates: Certificates) -> AsyncIterator[OperatorStandIn]:
    async with OperatorStandIn(certificates).serving() as standin:
        yield standin


@pytest.fixture(params=["streamable-http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def mcp_server() -> MutableServer:
    return MutableServer(tools=make_tools(3), instructions="Weather tools.", page_size=2)


@pytest.fixture
async def mcp(mcp_server: MutableServer, transport: str) -> AsyncIterator[McpServerHandle]:
    handle = McpServerHandle(mcp_server, transport)
    async with handle.serving():
        yield handle


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("token-1\n")
    return path
