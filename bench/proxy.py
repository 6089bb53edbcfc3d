"""Benchmark: what ``lockstep proxy`` adds, proxied against direct.

Run it with ``python bench/proxy.py`` (``--calls N``, ``--lists N``). A real MCP server (the ``mcp``
SDK's low-level server, 1,000 tools, on 127.0.0.1) is called directly and through the proxy, with
raw 2026-07-28 JSON-RPC POSTs over one keep-alive HTTP connection each (httpx2), alternating direct
and proxied requests so that drift of the shared machine hits both alike. Three figures:

- **tools/call passthrough**: the added latency (p50, p99) of a ``tools/call`` the proxy checks
  against the approved digests, stamps (log line, span) and forwards. Goal: under 1 ms at p50.
- **1,000-tool tools/list**: the added time of a list the proxy judges component by component, set
  against the time to validate and digest the same list in-process (``Interface.from_document`` +
  ``digest_interface``, what ``lockstep hash`` does with a file). Goal: the added time under 2x that.
- **RSS**: ``lockstep proxy`` as its own process (as a user runs it), after the lists and calls.
  Goal: under 60 MB.

The server, the clients and (for the first two figures) the proxy share one event loop and the two
cores of the machine, so absolute times are pessimistic; the differences are what counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import httpx2
from lockstep_testing.control_plane import free_port
from lockstep_testing.mcp_servers import MutableServer, make_tools, serve_mcp
from lockstep_testing.proxy_support import running_proxy

from lockstep.core import digest_interface
from lockstep.core.gate import ComponentGate
from lockstep.core.model import ComponentKind, Interface
from lockstep.core.revision import Revision
from lockstep.reader import read_interface

TOOLS = 1000
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "MCP-Protocol-Version": "2026-07-28"}


def request(number: int, method: str, **params: object) -> tuple[dict[str, object], dict[str, str]]:
    body = {"jsonrpc": "2.0", "id": number, "method": method, "params": {**params, "_meta": META}}
    headers = {**HEADERS, "Mcp-Method": method}
    if "name" in params:
        headers["Mcp-Name"] = str(params["name"])
    return body, headers


async def timed(client: httpx2.AsyncClient, url: str, number: int, method: str, expect: str,
                **params: object) -> float:
    body, headers = request(number, method, **params)
    started = time.perf_counter()
    response = await client.post(url, json=body, headers=headers)
    elapsed = time.perf_counter() - started
    if response.status_code != 200 or expect not in response.text:
        raise SystemExit(f"{method} via {url}: unexpected answer {response.status_code} {response.text[:200]}")
    return elapsed


async def alternate(direct_url: str, proxy_url: str, count: int, method: str, expect: str,
                    **params: object) -> tuple[list[float], list[float]]:
    direct, proxied = [], []
    async with httpx2.AsyncClient(timeout=60) as one, httpx2.AsyncClient(timeout=60) as other:
        for number in range(count + 5):  # the first five warm both paths up
            d = await timed(one, direct_url, number, method, expect, **params)
            p = await timed(other, proxy_url, number, method, expect, **params)
            if number >= 5:
                direct.append(d)
                proxied.append(p)
    return direct, proxied


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def in_process_check(document: dict[str, object], gate: ComponentGate, rounds: int) -> float:
    """Median seconds to judge every tool of the list with the core's gate (what the proxy does)."""
    tools = document["tools"]
    assert isinstance(tools, list)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for tool in tools:
            gate.check(ComponentKind.TOOL, tool)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def in_process_digest(document: dict[str, object], rounds: int) -> float:
    """Median seconds to validate and digest the list in-process, as ``lockstep hash FILE`` does."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        digest_interface(Interface.from_document({"tools": document["tools"]}))
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def rss_of(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def proxy_process_rss(upstream: str, snapshot: Path, lists: int, calls: int) -> tuple[float, float]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lockstep.cli", "proxy", "--upstream", upstream, "--against", str(snapshot),
        "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR", stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=60) as client:
            for _ in range(200):
                try:
                    await client.get(url)
                    break
                except httpx2.ConnectError:
                    await asyncio.sleep(0.05)
            for number in range(lists):
                await timed(client, url, number, "tools/list", "tool_999")
            for number in range(calls):
                await timed(client, url, number, "tools/call", "tool_0 called", name="tool_0", arguments={"city": "P"})
        return rss_of(process.pid)
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)


async def main(calls: int, lists: int) -> None:
    logging.getLogger("lockstep.proxy").setLevel(logging.ERROR)
    server = MutableServer(tools=make_tools(TOOLS))
    async with serve_mcp(server) as upstream:
        result = await read_interface(upstream)
        gate = ComponentGate.of([Revision.of(result.interface)])
        async with running_proxy(upstream, [result.interface]) as proxy:
            call_direct, call_proxied = await alternate(upstream, proxy.url, calls, "tools/call", "tool_0 called",
                                                        name="tool_0", arguments={"city": "Paris"})
            list_direct, list_proxied = await alternate(upstream, proxy.url, lists, "tools/list", "tool_999")
        check = in_process_check(result.document, gate, max(lists, 10))
        digest_all = in_process_digest(result.document, max(lists, 10))
        with tempfile.TemporaryDirectory() as folder:
            snapshot = Path(folder) / "snapshot.json"
            snapshot.write_text(json.dumps(result.document))
            rss, peak = await proxy_process_rss(upstream, snapshot, lists, min(calls, 500))

    added = [p - d for d, p in zip(call_direct, call_proxied, strict=True)]
    list_added = [p - d for d, p in zip(list_direct, list_proxied, strict=True)]
    ms = 1e3
    print(f"lockstep proxy against direct: {calls} tools/call, {lists} tools/list of {TOOLS} tools, one machine")
    print(f"{'measurement':<44} {'p50 ms':>9} {'p99 ms':>9}")
    for name, values in (("tools/call direct", call_direct), ("tools/call proxied", call_proxied),
                         ("tools/call added by the proxy", added), ("tools/list (1,000) direct", list_direct),
                         ("tools/list (1,000) proxied", list_proxied), ("tools/list (1,000) added", list_added)):
        print(f"{name:<44} {percentile(values, .5) * ms:9.2f} {percentile(values, .99) * ms:9.2f}")
    print(f"{'in-process gate check of the 1,000 tools':<44} {check * ms:9.2f}")
    print(f"{'in-process validate + digest of the list':<44} {digest_all * ms:9.2f}")
    ratio = percentile(list_added, .5) / digest_all
    print()
    print(f"{'goal':<52} {'value':>12} {'target':>10}  met")
    rows = [("added latency of a tools/call, p50", f"{percentile(added, .5) * ms:.2f} ms", "< 1 ms",
             percentile(added, .5) < 0.001),
            ("added time of a 1,000-tool list / in-process digest", f"{ratio:.2f}x", "< 2x", ratio < 2),
            ("RSS of the lockstep proxy process (peak)", f"{rss:.1f} MB ({peak:.1f})", "< 60 MB", peak < 60)]
    for name, value, target, met in rows:
        print(f"{name:<52} {value:>12} {target:>10}  {'yes' if met else 'no'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--lists", type=int, default=30)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.calls, arguments.lists))
