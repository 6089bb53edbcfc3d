"""The ``mcp`` fixture of the tiers whose pods serve the weather tools (``cluster_objects.TOOLS``): a real MCP
server on loopback (the `mcp` SDK's, through ``McpServerHandle``) whose tools a test may change and announce.
Import it into a test module or a conftest (``from lockstep_testing.weather_mcp import weather_mcp``): it is the
fixture ``mcp`` there, over a folder's own."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator

import pytest
from lockstep_testing.cluster_objects import TOOLS
from lockstep_testing.loopback import McpServerHandle
from lockstep_testing.mcp_servers import MutableServer

__all__ = ["weather_mcp"]


@pytest.fixture(name="mcp")
async def weather_mcp() -> AsyncIterator[McpServerHandle]:
    handle = McpServerHandle(MutableServer(tools=copy.deepcopy(TOOLS), instructions="Weather tools.",
                                           kinds=("tools",)))
    async with handle.serving():
        yield handle
