"""The connected-agents tier (issue 28): agents that hold a session through a Service while the server is
rug-pulled, for each enforcement, on a real node.

A rug pull is aimed at the agents already connected: the server changes a tool's description and sends
``notifications/tools/list_changed``, and every connected agent lists again at once, over the connection it
holds. Leaving the Service steers only new connections (kube-proxy keeps established flows), so only a
check on the path protects the connected agents: in Isolate and Quarantine the sidecar's in-line proxy is
on every agent-facing path (the server listens on 127.0.0.1, the Service targets ``lockstep-mcp``).

One pod of the e2e weather server per enforcement (Audit, Isolate, Quarantine), each behind its Service;
three agents per pod, all nine at once, each holding ONE session through the Service's ClusterIP, listing
tools every 0.5 s and on every list_changed: a plain HTTP/1.1 keep-alive client, the Python ``mcp`` SDK
client and the official TypeScript SDK client (``tests/foreign/clients/hold.mjs``). The ClusterIPs exist
only inside the node's network namespace: the clients run there (``nsenter --net``). Then the three pods
are pulled at once; each answer after the pull is counted poisoned or not, and a new agent connects after
the verdict. Isolate and Quarantine must deliver no poisoned answer to any client; Audit only reports (the
agents get the poison, by design). The table is printed (docs/proxy.md, README, docs/threat-model.md).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from e2e.in_node import NETNS, InNode, reachable
from lockstep_testing.real_cluster import POISON, Cluster, app_objects, eventually

HERE = Path(__file__).resolve().parent
FOREIGN = HERE.parent / "foreign"
MODES = ("Audit", "Isolate", "Quarantine")
CLIENTS = ("keep-alive", "python-sdk", "typescript-sdk")
MARKER = "<IMPORTANT>"
#: The most seconds an agent holds its session; the pull comes once every agent has listed CLEAN_FIRST times,
#: and the agents are stopped AFTER_PULL seconds after it.
HOLD, CLEAN_FIRST, AFTER_PULL = 120.0, 3, 12.0
FAST_PROBE = {"interval": "5s", "timeout": "5s", "staleAfter": "60s"}

KEEP_ALIVE = textwrap.dedent("""
    import http.client, json, sys, time
    host, port, seconds, marker = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    def line(**entry): print(json.dumps({"t": time.time(), **entry}), flush=True)
    conn, session = http.client.HTTPConnection(host, port, timeout=5), None
    def post(message):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if session:
            headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
        conn.request("POST", "/mcp", json.dumps(message), headers)
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        if "text/event-stream" in (response.getheader("Content-Type") or ""):
            data = [l[5:].strip() for l in body.splitlines() if l.startswith("data:") and l[5:].strip()]
            body = data[-1] if data else ""
        return response.status, response.getheader("Mcp-Session-Id"), body
    try:
        status, session, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "keep-alive-agent", "version": "1"}}})
        post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    except Exception as error:  # a new agent finds no endpoint
        line(kind="error", error=repr(error)[:200])
        sys.exit(0)
    line(kind="connected", status=status)
    end, n = time.time() + seconds, 1
    while time.time() < end:
        try:
            status, _, body = post({"jsonrpc": "2.0", "id": n, "method": "tools/list"})
            message = json.loads(body) if body else {}
            if "result" in message:
                tools = message["result"].get("tools", [])
                line(kind="list", poisoned=marker in json.dumps(tools), tools=[t.get("name") for t in tools])
            else:
                line(kind="error", error=f"HTTP {status}: {json.dumps(message.get('error'))[:200]}")
        except Exception as error:  # the connection dropped: an agent reconnects (same session)
            line(kind="error", error=repr(error)[:200])
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=5)
        n += 1
        time.sleep(0.5)
    line(kind="done")
""")

PYTHON_SDK = textwrap.dedent("""
    import anyio, json, sys, time
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    url, seconds, marker = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    def line(**entry): print(json.dumps({"t": time.time(), **entry}), flush=True)
    changed = anyio.Event()
    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification) \\
                or isinstance(getattr(message, "root", None), types.ToolListChangedNotification):
            line(kind="list_changed")
            changed.set()
    async def main():
        global changed
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                await session.initialize()
                line(kind="connected")
                end = time.time() + seconds
                while time.time() < end:
                    try:
                        with anyio.fail_after(5):
                            result = await session.list_tools()
                        tools = [tool.model_dump(by_alias=True, exclude_none=True) for tool in result.tools]
                        line(kind="list", poisoned=marker in json.dumps(tools), tools=[t["name"] for t in tools])
                    except Exception as error:
                        line(kind="error", error=repr(error)[:200])
                    with anyio.move_on_after(0.5):
                        await changed.wait()
                    changed = anyio.Event()
        line(kind="done")
    try:
        anyio.run(main)
    except BaseException as error:
        line(kind="error", error=repr(error)[:200])
""")


def _in_node(command: list[str]) -> InNode:
    return InNode(command)


def _agent(kind: str, ip: str, seconds: float) -> InNode:
    if kind == "keep-alive":
        return _in_node([sys.executable, "-c", KEEP_ALIVE, ip, "8080", str(seconds), MARKER])
    if kind == "python-sdk":
        return _in_node([sys.executable, "-c", PYTHON_SDK, f"http://{ip}:8080/mcp", str(seconds), MARKER])
    return _in_node([shutil.which("node") or "node", str(FOREIGN / "clients" / "hold.mjs"),
                     "--url", f"http://{ip}:8080/mcp", "--seconds", str(seconds), "--marker", MARKER])




def _summary(entries: list[dict[str, Any]], pulled_at: float) -> dict[str, Any]:
    before = [e for e in entries if e["kind"] == "list" and e["t"] < pulled_at]
    after = [e for e in entries if e["t"] >= pulled_at and e["kind"] in ("list", "error")]
    poisoned = [e for e in after if e["kind"] == "list" and e["poisoned"]]
    return {"clean_before": sum(not e["poisoned"] for e in before), "answers_after": len(after),
            "lists_after": sum(e["kind"] == "list" for e in after), "refused_after": sum(e["kind"] == "error" for e in after),
            "poisoned_after": len(poisoned),
            "window": (max(e["t"] for e in poisoned) - pulled_at) if poisoned else None,
            "errors": sorted({e.get("error", "")[:90] for e in after if e["kind"] == "error"})[:3]}


def _new_agent(ip: str) -> str:
    """A new agent after the verdict: one fresh session through the Service, one list."""
    agent = _agent("keep-alive", ip, 0.6)
    agent.process.wait(timeout=30)
    entries = [e for e in agent.stop() if e["kind"] in ("list", "error")]
    if not entries:
        return "no answer"
    entry = entries[0]
    if entry["kind"] == "error":
        return "refused: " + entry["error"][:60]
    return "poisoned list" if entry["poisoned"] else f"clean list {entry['tools']}"


@pytest.fixture(scope="module")
def node_netns() -> str:
    if not Path(NETNS).exists() or os.geteuid() != 0:
        pytest.skip(f"the ClusterIPs are reached from the node's network namespace ({NETNS}, as root)")
    if not (FOREIGN / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir() or not shutil.which("node"):
        pytest.skip("the TypeScript SDK client needs tests/foreign/install and node")
    return NETNS


def test_no_connected_agent_gets_a_poisoned_answer_in_isolate_or_quarantine(cluster: Cluster, node_netns: str) -> None:
    apps = {mode: f"weather-{mode.lower()}" for mode in MODES}
    for mode, app in apps.items():  # the interface first: the webhook reads its enforcement at admission
        cluster.apply_interface({
            "apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface", "metadata": {"name": app},
            "spec": {"selector": {"matchLabels": {"app": app}}, "endpoint": {"port": 8080, "path": "/mcp"},
                     "enforcement": mode, "approval": "FirstSeen", "probe": FAST_PROBE}})
    for mode, app in apps.items():
        # Audit runs no proxy: its Service targets the server, which listens on the pod's IP.
        exposed = {"host": "0.0.0.0", "service_port": "mcp"} if mode == "Audit" else {}
        cluster.create(app_objects(app, cluster.namespace, replicas=1, **exposed))
    for app in apps.values():
        eventually(lambda app=app: len(cluster.ready(app)) == 1 and cluster.ready_endpoints(app), f"{app} verified, in its Service")
        pod = cluster.pods(app)[0]
        ports = {p.name for c in pod.spec.init_containers for p in c.ports or []}
        assert ("lockstep-mcp" in ports) is (app != apps["Audit"]), (app, ports)
    ips = {mode: cluster.core.read_namespaced_service(app, cluster.namespace).spec.cluster_ip
           for mode, app in apps.items()}
    for mode, ip in ips.items():  # kube-proxy programs a new Service's rules a moment after its endpoints
        eventually(lambda ip=ip: reachable(ip, 8080), f"the ClusterIP of {apps[mode]} answering", interval=0.2)

    started = time.time()
    agents = {(mode, kind): _agent(kind, ips[mode], HOLD) for mode in MODES for kind in CLIENTS}
    eventually(lambda: all(agent.lists() >= CLEAN_FIRST for agent in agents.values()),
               f"every agent connected and listing ({ {k: a.lists() for k, a in agents.items()} })",
               timeout=60, interval=0.5)
    pulled_at = {}
    for mode, app in apps.items():
        pulled_at[mode] = time.time()
        cluster.write_file(cluster.pods(app)[0].metadata.name, "/data/description", POISON)
    time.sleep(AFTER_PULL)
    results = {key: agent.stop() for key, agent in agents.items()}
    for mode, app in apps.items():
        expected = {"Audit": ("True", "Audit"), "Isolate": ("False", "InterfaceChanged"),
                    "Quarantine": ("True", "Quarantined")}[mode]
        eventually(lambda app=app, expected=expected: list(cluster.verdicts(app).values()) == [expected],
                   f"{app}: verdict {expected}", timeout=30)
    news = {mode: _new_agent(ips[mode]) for mode in MODES}

    summaries = {key: _summary(entries, pulled_at[key[0]]) for key, entries in results.items()}
    rows = ["| enforcement | agent | clean lists before | answers after the pull | poisoned after the pull "
            "| window (pull to last poisoned) | refused after |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for (mode, kind), s in summaries.items():
        window = f"{s['window']:.1f} s" if s["window"] is not None else "none"
        rows.append(f"| {mode} | {kind} | {s['clean_before']} | {s['answers_after']} | {s['poisoned_after']} "
                    f"| {window} | {s['refused_after']} |")
    rows.append("")
    rows += [f"new agent after the verdict, {mode}: {news[mode]}" for mode in MODES]
    print(f"\nconnected agents (issue 28), {time.time() - started:.0f} s, agents stopped {AFTER_PULL:.0f} s after "
          "the pull:\n" + "\n".join(rows))
    for key, s in summaries.items():
        print(key, s["errors"])
    for mode, app in apps.items():
        print(mode, cluster.verdicts(app), "endpoints:", cluster.ready_endpoints(app))

    for (mode, kind), s in summaries.items():
        assert s["clean_before"] >= CLEAN_FIRST, f"{mode}/{kind} was not connected and listing before the pull: {results[(mode, kind)][:5]}"
        assert s["answers_after"] >= 3, f"{mode}/{kind} stopped asking after the pull: {results[(mode, kind)][-5:]}"
        if mode == "Audit":
            assert s["poisoned_after"] > 0, f"Audit only reports: {kind} should see the poison ({s})"
        else:
            assert s["poisoned_after"] == 0, f"{mode}: {kind} got {s['poisoned_after']} poisoned answers ({s})"
    assert news["Quarantine"].startswith("clean list") and news["Audit"] == "poisoned list", news
    assert not news["Isolate"].startswith("poisoned"), news
