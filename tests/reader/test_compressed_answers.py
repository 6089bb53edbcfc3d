"""Compressed answers (issue 10): a server that gzips its answers although the reader asked for
identity is refused with a size error on every transport, before anything is decoded. Before, the
16 MiB limit counted compressed bytes: ~1 MB of gzip decoding to 1 GiB passed it, `lockstep verify`
reached 2-4 GB of RSS, and over SSE it even said "verified"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lockstep_testing.mcp_servers import Gzipped, HostileServer, MutableServer, serve_mcp

from lockstep.reader import ResponseTooLargeError, read_interface

TOOLS = [{"name": "get_forecast", "description": "Forecast.", "inputSchema": {"type": "object"}}]


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_gzipped_answer_is_refused_as_a_size_error(transport: str) -> None:
    async with serve_mcp(Gzipped(MutableServer(tools=TOOLS)), transport) as url:
        with pytest.raises(ResponseTooLargeError) as refused:
            await read_interface(url, timeout=10)
    message = str(refused.value)
    assert "Content-Encoding 'gzip'" in message and "\n" not in message


async def test_the_reader_asks_for_identity() -> None:
    server = MutableServer(tools=TOOLS)
    async with serve_mcp(server) as url:
        await read_interface(url, timeout=10)
    assert {request.get("accept-encoding") for request in server.http_requests} == {"identity"}


def _bomb_server() -> Gzipped:
    # 64 MiB of JSON that gzips to about 64 KB: decoded, it is four times the reader's limit.
    padding = "0" * (64 * 1024 * 1024)
    return Gzipped(HostileServer(answers={"tools/list": '{"tools": [], "padding": "' + padding + '"}'}))


@pytest.mark.slow
async def test_lockstep_verify_refuses_a_decompression_bomb_with_exit_2(tmp_path: Path) -> None:
    pin = tmp_path / "pin.json"
    pin.write_text(json.dumps({"tools": []}))
    async with serve_mcp(_bomb_server()) as url:
        import asyncio

        result = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "lockstep.cli", "verify", url,
                                                          "--against", str(pin)],
                                         capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "Content-Encoding 'gzip'" in line


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_an_oversized_answer_is_a_size_error_on_every_transport(transport: str) -> None:
    """2 MiB in one answer, no string over the 1 MiB string limit, against a 1 MiB answer limit. Before,
    on the legacy SSE transport an event over the SDK's 1 MiB cap was reported as ServerUnreachable."""
    from lockstep.core.model import Limits

    big = [{"name": f"t{i}", "description": "x" * (100 * 1024), "inputSchema": {"type": "object"}}
           for i in range(20)]
    async with serve_mcp(MutableServer(tools=big), transport) as url:
        with pytest.raises(ResponseTooLargeError) as refused:
            await read_interface(url, timeout=20, transport=transport, limits=Limits(max_bytes=1024 * 1024))
    assert "\n" not in str(refused.value) and "larger than" in str(refused.value)
