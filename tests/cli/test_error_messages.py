"""Error messages a new user meets (issue 12): one line, the URL said once, and a hint for the usual
mistakes. Before: `error: http://…/mcp: http://…/mcp: cannot connect`, "No such file or directory" for
a URL without its scheme, a bare "HTTP 400 Bad Request" for the wrong transport, and "got kind None" for
a Chart.yaml."""

from __future__ import annotations

import socket

from lockstep_testing.mcp_servers import MutableServer, serve_mcp_in_thread

TOOLS = [{"name": "a", "inputSchema": {"type": "object"}}]


def one_line(result) -> str:
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def test_an_unreachable_server_is_named_once(invoke):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens on it once closed
    url = f"http://127.0.0.1:{port}/mcp"
    line = one_line(invoke("hash", url))
    assert line.count(url) == 1 and "cannot connect" in line


def test_a_server_address_without_a_scheme_gets_a_hint(invoke):
    line = one_line(invoke("hash", "127.0.0.1:18080/mcp"))
    assert "no such file" in line and "http://127.0.0.1:18080/mcp" in line


def test_the_wrong_transport_gets_a_hint(invoke):
    with serve_mcp_in_thread(MutableServer(tools=TOOLS)) as handle:
        line = one_line(invoke("hash", handle.url, "--transport", "sse", "--timeout", "5"))
    assert "try without --transport sse" in line


def test_a_yaml_file_that_is_not_a_manifest_says_what_it_is(invoke, write):
    chart, pin = write("Chart.yaml", "apiVersion: v2\nname: lockstep\n"), write("pin.json", {"tools": TOOLS})
    for args in (["verify", pin, "--against", chart], ["verify", chart, "--against", pin]):
        line = one_line(invoke(*args))
        assert "not an MCPServerInterface manifest" in line and "no kind" in line and "None" not in line
