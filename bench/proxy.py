"""Benchmark: what ``lockstep proxy`` adds, proxied against direct.

Run it with ``python bench/proxy.py`` (``--calls N``, ``--lists N``). A real MCP server (the ``mcp``
SDK's low-level server with 1,000 tools on one page, on 127.0.0.1) is called directly and through
the proxy with raw 2026-07-28 JSON-RPC POSTs, one keep-alive HTTP connection per path (httpx2).
Direct and proxied requests alternate, and which of the two goes first alternates too, so that
drift of the shared machine hits both alike. The server needs no ``server/discover`` first: every
request carries the protocol version, client info and capabilities in ``params._meta``, and the
``MCP-Protocol-Version``, ``Mcp-Method`` and (for a call) ``Mcp-Name`` headers, without which it
answers HTTP 400; it answers ``application/json``. Every answer is checked: a call must carry
``tool_0 called`` exactly once, a list all 1,000 tools (nothing withheld). Three figures:

- **tools/call passthrough**: the added latency (p50, p99 of the per-pair difference) of a
  ``tools/call`` the proxy checks against the approved digests, stamps (log line, span) and
  forwards. Goal: under 1 ms at p50.
- **1,000-tool tools/list**: the added time of a list the proxy judges component by component, set
  against the in-process time of the same work: ``gate.check`` on every tool (what the proxy does
  with each item) and ``digest_interface`` of the interface (the digest alone, of an interface
  already validated). Goal: the added time under 2x the in-process time; both ratios are printed.
- **RSS**: ``lockstep proxy`` as its own process, as a user runs it (``.venv/bin/lockstep proxy
  --upstream URL --against SNAPSHOT``, default log level), once listening and after the lists and
  calls (VmRSS, and the peak VmHWM, from ``/proc/PID/status``). Goal: under 60 MB. The same pass
  times the lists and calls through that process against direct, for comparison.

For the first two figures the server, the client and the proxy share one process, one event loop
and the two cores of the machine, so absolute times are pessimistic; the differences are what
counts. The garbage collector's pauses during the list rounds are printed: a full collection of
that process's heap lands on whichever request allocated last, and makes the list's p99.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import httpx2
from lockstep.demo.control_plane import free_port
from lockstep_testing.mcp_servers import MutableServer, make_tools, serve_mcp
from lockstep_testing.proxy_support import running_proxy

from lockstep.core import digest_interface
from lockstep.core.gate import ComponentGate
from lockstep.core.model import ComponentKind, Interface
from lockstep.core.revision import Revision
from lockstep.reader import read_interface

TOOLS = 1000
WARM_UP = 5
PROCESS_CALLS = 500  # at most, through the separate proxy process
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "MCP-Protocol-Version": "2026-07-28"}
CALL = ("tools/call", {"name": "tool_0", "arguments": {"city": "Paris"}})
LIST = ("tools/list", {})
MS = 1e3


def request(number: int, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 request: no session, the protocol in ``_meta`` and in the headers."""
    body = {"jsonrpc": "2.0", "id": number, "method": method, "params": {**params, "_meta": META}}
    headers = {**HEADERS, "Mcp-Method": method}
    if "name" in params:
        headers["Mcp-Name"] = str(params["name"])
    return body, headers


def check_answer(method: str, url: str, status: int, text: str) -> None:
    """Fail loudly unless the answer is the real thing (a measured error would flatter the proxy)."""
    problem = ""
    if status != 200:
        problem = f"HTTP {status}"
    elif method == "tools/call" and text.count("tool_0 called") != 1:
        problem = "no 'tool_0 called' (exactly once) in the result"
    elif method == "tools/list":
        tools = json.loads(text).get("result", {}).get("tools", [])
        if len(tools) != TOOLS:
            problem = f"{len(tools)} tools instead of {TOOLS}"
    if problem:
        raise SystemExit(f"{method} via {url}: {problem}: {text[:300]}")


async def timed(client: httpx2.AsyncClient, url: str, number: int, call: tuple[str, dict[str, Any]]) -> float:
    """Seconds from sending the request to having the whole answer; the answer is checked after."""
    method, params = call
    body, headers = request(number, method, params)
    content = json.dumps(body).encode()
    started = time.perf_counter()
    response = await client.post(url, content=content, headers=headers)
    elapsed = time.perf_counter() - started
    check_answer(method, url, response.status_code, response.text)
    return elapsed


async def alternate(direct_url: str, proxy_url: str, count: int,
                    call: tuple[str, dict[str, Any]]) -> tuple[list[float], list[float]]:
    """``count`` pairs of the same request, direct and proxied, after a few pairs to warm both up."""
    direct, proxied = [], []
    async with httpx2.AsyncClient(timeout=60) as one, httpx2.AsyncClient(timeout=60) as other:
        for number in range(count + WARM_UP):
            if number % 2:
                p = await timed(other, proxy_url, number, call)
                d = await timed(one, direct_url, number, call)
            else:
                d = await timed(one, direct_url, number, call)
                p = await timed(other, proxy_url, number, call)
            if number >= WARM_UP:
                direct.append(d)
                proxied.append(p)
    return direct, proxied


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class GcPauses:
    """Durations of the collector's runs per generation, while ``recording``."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self.recording = False
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self.recording:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def __enter__(self) -> Self:
        gc.callbacks.append(self)
        self.recording = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.recording = False
        gc.callbacks.remove(self)


def median_seconds(action: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def in_process(document: dict[str, Any], interface: Interface, gate: ComponentGate,
               rounds: int) -> dict[str, float]:
    """Median seconds of the proxy's per-item work, and of digesting, on the same 1,000 tools."""
    tools = document["tools"]

    def check_all() -> None:
        for tool in tools:
            if not gate.check(ComponentKind.TOOL, tool).approved:
                raise SystemExit(f"the gate refuses {tool.get('name')}")

    return {
        "gate.check on every tool (what the proxy does)": median_seconds(check_all, rounds),
        "digest_interface of the interface": median_seconds(lambda: digest_interface(interface), rounds),
        "Interface.from_document + digest_interface": median_seconds(
            lambda: digest_interface(Interface.from_document({"tools": tools})), rounds),
    }


def memory_of(pid: int) -> tuple[float, float]:
    """VmRSS and VmHWM (peak) of a process, in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def proxy_command() -> list[str]:
    """``lockstep`` as installed beside this Python (the venv's entry point), else ``-m lockstep.cli``."""
    script = Path(sys.executable).parent / "lockstep"
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", "lockstep.cli"]


async def wait_listening(port: int, process: asyncio.subprocess.Process) -> None:
    for _ in range(400):
        if process.returncode is not None:
            raise SystemExit(f"lockstep proxy exited with {process.returncode} before it listened")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise SystemExit("lockstep proxy did not listen within 20 s")


async def proxy_process(upstream: str, snapshot: Path, lists: int, calls: int) -> dict[str, Any]:
    """``lockstep proxy`` as its own process: its memory idle and after the load, and the load's times."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *proxy_command(), "proxy", "--upstream", upstream, "--against", str(snapshot),
        "--listen", f"127.0.0.1:{port}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_listening(port, process)
        url = f"http://127.0.0.1:{port}/mcp"
        await asyncio.sleep(0.2)
        idle = memory_of(process.pid)
        list_pair = await alternate(upstream, url, lists, LIST)
        call_pair = await alternate(upstream, url, calls, CALL)
        loaded = memory_of(process.pid)
        return {"idle": idle, "loaded": loaded, "lists": list_pair, "calls": call_pair}
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


def added(pair: tuple[list[float], list[float]]) -> list[float]:
    direct, proxied = pair
    return [p - d for d, p in zip(direct, proxied, strict=True)]


def print_row(name: str, values: list[float] | None = None, single: float | None = None) -> None:
    if values is not None:
        print(f"{name:<54} {percentile(values, .5) * MS:9.2f} {percentile(values, .99) * MS:9.2f}")
    else:
        print(f"{name:<54} {(single or 0) * MS:9.2f} {'':>9}")


def print_pair(label: str, pair: tuple[list[float], list[float]]) -> None:
    print_row(f"{label} direct", pair[0])
    print_row(f"{label} proxied", pair[1])
    print_row(f"{label} added (per pair)", added(pair))


async def main(calls: int, lists: int) -> None:
    logging.getLogger("lockstep.proxy").setLevel(logging.ERROR)  # its per-call log line would go to stderr
    server = MutableServer(tools=make_tools(TOOLS), page_size=None)
    async with serve_mcp(server) as upstream:
        result = await read_interface(upstream)
        interface = result.interface
        gate = ComponentGate.of([Revision.of(interface)])
        async with running_proxy(upstream, [interface]) as proxy:
            call_pair = await alternate(upstream, proxy.url, calls, CALL)
            with GcPauses() as pauses:
                list_pair = await alternate(upstream, proxy.url, lists, LIST)
            if proxy.findings:
                raise SystemExit(f"the proxy withheld {len(proxy.findings)} components: not a clean pass")
        reference = in_process(result.document, interface, gate, max(lists, 10))
        with tempfile.TemporaryDirectory() as folder:
            snapshot = Path(folder) / "snapshot.json"
            with snapshot.open("w") as file:
                json.dump(result.document, file)
            process_calls = min(calls, PROCESS_CALLS)
            separate = await proxy_process(upstream, snapshot, lists, process_calls)

    print(f"lockstep proxy against direct: {calls} tools/call and {lists} tools/list of {TOOLS} tools "
          f"(one page, {len(json.dumps(result.document['tools'])) / 1e3:.0f} kB), alternating, on loopback; "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print(f"{'measurement':<54} {'p50 ms':>9} {'p99 ms':>9}")
    print("in-process proxy (server, client and proxy on one event loop):")
    print_pair("  tools/call", call_pair)
    print_pair(f"  tools/list ({TOOLS:,})", list_pair)
    print(f"in-process, the same {TOOLS:,} tools (median):")
    for name, seconds in reference.items():
        print_row(f"  {name}", single=seconds)
    print(f"lockstep proxy as its own process (log level info; {lists} lists, {process_calls} calls):")
    print_pair("  tools/call", separate["calls"])
    print_pair(f"  tools/list ({TOOLS:,})", separate["lists"])
    full = pauses.pauses[2]
    print(f"garbage collector during the in-process list rounds: {sum(map(len, pauses.pauses.values()))} runs, "
          f"{len(full)} full; full collections took {sum(full) * MS:.1f} ms in all, "
          f"{max(full, default=0) * MS:.1f} ms at most")

    call_added = percentile(added(call_pair), .5)
    list_added = percentile(added(list_pair), .5)
    check_seconds, digest_seconds = list(reference.values())[:2]
    (idle_rss, _), (rss, peak) = separate["idle"], separate["loaded"]
    rows = [
        ("tools/call added latency, p50", f"{call_added * MS:.2f} ms", "< 1 ms", call_added < 0.001),
        ("tools/call added latency, p99", f"{percentile(added(call_pair), .99) * MS:.2f} ms", "-", None),
        ("1,000-tool list added / in-process gate.check of all", f"{list_added / check_seconds:.2f}x", "< 2x",
         list_added / check_seconds < 2),
        ("1,000-tool list added / in-process digest_interface", f"{list_added / digest_seconds:.2f}x", "< 2x",
         list_added / digest_seconds < 2),
        ("RSS of lockstep proxy, listening (before any request)", f"{idle_rss:.1f} MB", "-", None),
        ("RSS of lockstep proxy after the lists and calls", f"{rss:.1f} MB", "< 60 MB", rss < 60),
        ("peak RSS (VmHWM) of lockstep proxy", f"{peak:.1f} MB", "< 60 MB", peak < 60),
    ]
    print()
    print(f"{'metric':<54} {'value':>10} {'goal':>9}  met")
    for name, value, goal, met in rows:
        print(f"{name:<54} {value:>10} {goal:>9}  {'-' if met is None else 'yes' if met else 'no'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="tools/call pairs (direct + proxied)")
    parser.add_argument("--lists", type=int, default=30, help="1,000-tool tools/list pairs (direct + proxied)")
    arguments = parser.parse_args()
    if arguments.calls < 1 or arguments.lists < 1:
        parser.error("--calls and --lists must be at least 1")
    asyncio.run(main(arguments.calls, arguments.lists))
