"""Wire data the SDK's servers would never send, from a hand-written JSON-RPC server."""

from __future__ import annotations

from typing import Any

import pytest
from lockstep_testing.mcp_servers import HostileServer, serve_mcp

from lockstep.core import MalformedInterfaceError, MissingKeyError, NonFiniteNumberError
from lockstep.reader import (
    MalformedResponseError,
    ProtocolError,
    ReaderError,
    ServerUnreachableError,
    read_interface,
)

TOOLS = {"tools": {"listChanged": False}}
A_TOOL = '{"name": "a", "inputSchema": {"type": "object"}}'


async def read(server: HostileServer, **options: Any) -> Any:
    async with serve_mcp(server) as url:
        return await read_interface(url, **options)


async def failure(server: HostileServer, **options: Any) -> Exception:
    with pytest.raises(Exception) as caught:
        await read(server, **options)
    message = str(caught.value)
    assert message and "\n" not in message  # one line
    return caught.value


async def test_raw_wire_json_is_kept_exactly() -> None:
    """Text the server wrote: number spellings, escapes, nesting, key order."""
    raw = (
        '{"tools": [{"name": "t", "inputSchema": {"type": "object", "maximum": 1e2, "minimum": -0.0,'
        ' "multipleOf": 0.1, "x": 12345678901234567890123}, "description": "caf\\u00e9 \\ud83d\\ude00",'
        ' "zeta": 1, "alpha": 2}], "nextCursor": null, "_meta": {"page": 1}}'
    )
    result = await read(HostileServer(answers={"tools/list": raw}))
    tool = result.document["tools"][0]
    assert tool["inputSchema"]["maximum"] == 100.0 and isinstance(tool["inputSchema"]["maximum"], float)
    assert tool["inputSchema"]["x"] == 12345678901234567890123
    assert tool["description"] == "café 😀"
    assert list(tool) == ["name", "inputSchema", "description", "zeta", "alpha"]
    assert set(result.document) == {"tools", "serverInfo"}


async def test_protocol_2025_06_18() -> None:
    server = HostileServer(
        protocol_version="2025-06-18", instructions="old", answers={"tools/list": {"tools": []}}
    )
    result = await read(server)
    assert result.protocol_version == "2025-06-18"
    assert result.document == {
        "instructions": "old",
        "tools": [],
        "serverInfo": {"name": "hostile", "version": "6.6.6"},
    }


async def test_unknown_protocol_version_is_a_protocol_error() -> None:
    error = await failure(HostileServer(protocol_version="1999-01-01"))
    assert isinstance(error, ProtocolError) and "1999-01-01" in str(error)


async def test_tools_not_a_list() -> None:
    error = await failure(HostileServer(answers={"tools/list": '{"tools": {"name": "a"}}'}))
    assert isinstance(error, MalformedResponseError)
    assert str(error) == "tools/list: page 1 has a dict for 'tools' list"


async def test_result_without_the_list() -> None:
    error = await failure(HostileServer(answers={"tools/list": '{"items": []}'}))
    assert isinstance(error, MalformedResponseError) and "page 1 has no 'tools' list" in str(error)


async def test_tool_without_a_name_is_an_invalid_interface() -> None:
    answer = '{"tools": [' + A_TOOL + ', {"description": "who am I", "inputSchema": {}}]}'
    error = await failure(HostileServer(answers={"tools/list": answer}))
    assert isinstance(error, MissingKeyError) and not isinstance(error, ReaderError)
    assert "/tools/1" in str(error)


async def test_tool_that_is_not_an_object() -> None:
    error = await failure(HostileServer(answers={"tools/list": '{"tools": [' + A_TOOL + ', "b"]}'}))
    assert isinstance(error, MalformedInterfaceError)


async def test_nan_is_refused() -> None:
    answer = '{"tools": [{"name": "a", "inputSchema": {"type": "object", "maximum": NaN}}]}'
    error = await failure(HostileServer(answers={"tools/list": answer}))
    assert isinstance(error, NonFiniteNumberError)


async def test_overflowing_number_is_refused() -> None:
    answer = '{"tools": [{"name": "a", "inputSchema": {"type": "object", "maximum": 1e999}}]}'
    error = await failure(HostileServer(answers={"tools/list": answer}))
    assert isinstance(error, NonFiniteNumberError)


async def test_broken_json() -> None:
    error = await failure(HostileServer(answers={"tools/list": '{"tools": [{"name": "a",'}))
    assert isinstance(
        error, MalformedResponseError
    ) and "tools/list: the answer is not valid JSON-RPC" in str(error)


async def test_nesting_beyond_the_json_parser() -> None:
    deep = "[" * 5000 + "]" * 5000
    answer = '{"tools": [{"name": "a", "inputSchema": {"type": "object", "x": ' + deep + "}}]}"
    error = await failure(HostileServer(answers={"tools/list": answer}))
    assert isinstance(error, MalformedResponseError) and "recursion limit" in str(error)


async def test_cursor_that_is_not_a_string() -> None:
    error = await failure(HostileServer(answers={"tools/list": '{"tools": [], "nextCursor": 2}'}))
    assert isinstance(error, MalformedResponseError) and "nextCursor is not a string" in str(error)


async def test_json_rpc_error_on_an_announced_list() -> None:
    error = await failure(HostileServer(answers={}))  # tools announced, tools/list unknown: -32601
    assert isinstance(error, ProtocolError)
    assert str(error) == "tools/list: the server answered error -32601: Method not found: tools/list"


async def test_resources_without_templates_method() -> None:
    """Many servers announce resources and do not serve resources/templates/list."""
    server = HostileServer(capabilities={"resources": {}}, answers={"resources/list": {"resources": []}})
    result = await read(server)
    assert result.document == {"resources": [], "serverInfo": {"name": "hostile", "version": "6.6.6"}}
    assert server.methods[-1] == "resources/templates/list"


async def test_server_that_wants_credentials() -> None:
    error = await failure(HostileServer(status=401))
    assert isinstance(error, ServerUnreachableError) and "HTTP 401 Unauthorized" in str(error)


async def test_result_level_fields_are_not_the_interface() -> None:
    answer = {
        "tools": [{"name": "a", "inputSchema": {}}],
        "ttlMs": 5,
        "cacheScope": "private",
        "resultType": "complete",
    }
    result = await read(HostileServer(answers={"tools/list": answer}))
    assert set(result.document) == {"tools", "serverInfo"}
    assert result.document["tools"] == [{"name": "a", "inputSchema": {}}]


async def test_lone_surrogate_is_unreadable() -> None:
    answer = '{"tools": [{"name": "a\\ud800", "inputSchema": {}}]}'
    error = await failure(HostileServer(answers={"tools/list": answer}))
    assert isinstance(error, MalformedResponseError)
