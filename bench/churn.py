"""How the severity rules rank the legitimate churn of real MCP servers.

Real servers change their interface between releases: rewording, new
parameters, new tools. Lockstep reports every change as drift; this bench
measures how the severity rules rank such legitimate changes, so that the
false-high rate is known.

    python bench/churn.py                # offline: diff the pinned corpus, print the table
    python bench/churn.py --details      # ... and every finding with its reasons
    python bench/churn.py --refresh      # install each version, read its interface, pin it
    python bench/churn.py --cost         # ... and time the diff of 1,000 changed tools

``--refresh`` installs each listed version of each server into a scratch
folder (PyPI packages into one virtualenv per server, npm packages with
``npm install``), starts it over stdio, and reads its interface with plain
JSON-RPC (initialize, then every list method with every cursor), so the
pinned document is exactly what the server put on the wire. Documents go to
``tests/corpus/churn/<server>/<version>.json``; the table compares each
version with the one before it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep.core.diff import Finding, Severity, diff_interfaces
from lockstep.core.model import Interface

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus" / "churn"
READ_TIMEOUT = 60.0
LIST_METHODS = (
    ("tools", "tools/list", "tools"),
    ("prompts", "prompts/list", "prompts"),
    ("resources", "resources/list", "resources"),
    ("resources", "resources/templates/list", "resourceTemplates"),
)


@dataclass(frozen=True)
class ServerSpec:
    """One server to pin: where it comes from, which versions, how to start it."""

    name: str
    registry: str  # "pypi" or "npm"
    package: str
    versions: tuple[str, ...]
    command: Callable[[Path, Path], list[str]]  # (install folder, scratch folder) -> argv


def _pypi_script(script: str, *args: str) -> Callable[[Path, Path], list[str]]:
    def command(prefix: Path, scratch: Path) -> list[str]:
        return [str(prefix / "bin" / script), *[arg.format(scratch=scratch) for arg in args]]
    return command


def _npm_entry(package: str, *args: str) -> Callable[[Path, Path], list[str]]:
    def command(prefix: Path, scratch: Path) -> list[str]:
        manifest = json.loads((prefix / "node_modules" / package / "package.json").read_text())
        entry = manifest["bin"] if isinstance(manifest["bin"], str) else next(iter(manifest["bin"].values()))
        script = prefix / "node_modules" / package / entry
        return ["node", str(script), *[arg.format(scratch=scratch) for arg in args]]
    return command


SERVERS = (
    ServerSpec("mcp-server-time", "pypi", "mcp-server-time",
               ("0.6.2", "2025.7.1", "2025.9.25", "2026.1.26", "2026.6.4", "2026.10.19"),
               _pypi_script("mcp-server-time", "--local-timezone", "UTC")),
    ServerSpec("mcp-server-fetch", "pypi", "mcp-server-fetch",
               ("0.6.2", "2025.1.17", "2025.4.7", "2026.6.4", "2026.10.24"),
               _pypi_script("mcp-server-fetch")),
    ServerSpec("mcp-server-git", "pypi", "mcp-server-git",
               ("0.6.2", "2025.1.14", "2025.7.1", "2025.9.25", "2025.12.18", "2026.6.4", "2026.10.19"),
               _pypi_script("mcp-server-git", "--repository", "{scratch}/repo")),
    ServerSpec("mcp-server-sqlite", "pypi", "mcp-server-sqlite",
               ("0.5.1", "0.6.2", "2025.1.14", "2025.4.25"),
               _pypi_script("mcp-server-sqlite", "--db-path", "{scratch}/test.db")),
    ServerSpec("server-filesystem", "npm", "@modelcontextprotocol/server-filesystem",
               ("0.6.2", "2025.1.14", "2025.3.28", "2025.7.1", "2025.8.21", "2025.11.25", "2026.1.14", "2026.8.31"),
               _npm_entry("@modelcontextprotocol/server-filesystem", "{scratch}")),
    ServerSpec("server-memory", "npm", "@modelcontextprotocol/server-memory",
               ("0.6.2", "2025.4.25", "2025.8.4", "2025.11.25", "2026.8.31"),
               _npm_entry("@modelcontextprotocol/server-memory")),
    ServerSpec("server-everything", "npm", "@modelcontextprotocol/server-everything",
               ("0.6.2", "2025.3.19", "2025.7.1", "2025.11.25", "2026.8.31"),
               _npm_entry("@modelcontextprotocol/server-everything", "stdio")),
    # Third-party servers with longer, more instructive descriptions.
    ServerSpec("context7", "npm", "@upstash/context7-mcp",
               ("1.0.7", "1.0.14", "1.0.20", "1.0.33", "2.0.2", "2.1.8", "3.0.0", "3.2.5", "4.0.7", "4.1.1"),
               _npm_entry("@upstash/context7-mcp")),
    ServerSpec("playwright", "npm", "@playwright/mcp",
               ("0.0.20", "0.0.30", "0.0.40", "0.0.50", "0.0.60", "0.0.70", "0.0.83"),
               _npm_entry("@playwright/mcp", "--headless")),
)


# --------------------------------------------------------------------------- reading a server

class ReadError(Exception):
    """The server did not start or did not answer like an MCP server."""


async def read_interface(argv: Sequence[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start ``argv``, speak JSON-RPC over its stdio, return the interface document it serves."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env, limit=64 * 1024 * 1024,
    )
    try:
        return await asyncio.wait_for(_converse(process), READ_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def _converse(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    ids = iter(range(1, 1_000_000))

    async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(ids)
        _send(process, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        await process.stdin.drain()  # type: ignore[union-attr]
        while True:
            line = await process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise ReadError(f"server closed its output during {method}")
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue  # a log line on stdout
            if message.get("id") == request_id:
                if "error" in message:
                    raise ReadError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    initialized = await call("initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "lockstep-churn-bench", "version": "0"},
    })
    _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    capabilities = initialized.get("capabilities", {})
    document: dict[str, Any] = {}
    if initialized.get("instructions"):
        document["instructions"] = initialized["instructions"]
    for capability, method, key in LIST_METHODS:
        if capability not in capabilities:
            continue
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            try:
                page = await call(method, {"cursor": cursor} if cursor else {})
            except ReadError:
                if key == "resourceTemplates":
                    break  # old servers announce resources but do not implement templates
                raise
            items += page.get(key, [])
            cursor = page.get("nextCursor")
            if not cursor or cursor in seen:
                break
            seen.add(cursor)
        if items:
            document[key] = items
    return document


def _send(process: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")


# --------------------------------------------------------------------------- installing versions

def _run(argv: Sequence[str], **kwargs: Any) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)


def _install_pypi(spec: ServerSpec, version: str, root: Path) -> Path:
    """One virtualenv per server; each version installed over the last with its own dependencies."""
    prefix = root / f"venv-{spec.name}"
    if not prefix.exists():
        venv.create(prefix, with_pip=True)
    _run([str(prefix / "bin" / "pip"), "install", "-q", f"{spec.package}=={version}"])
    return prefix


def _pin_sdk_1(prefix: Path) -> None:
    """Old releases declare ``mcp>=1`` yet import 1.x APIs that 2.x removed."""
    _run([str(prefix / "bin" / "pip"), "install", "-q", "mcp<2"])


def _install_npm(spec: ServerSpec, version: str, root: Path) -> Path:
    prefix = root / f"npm-{spec.name}-{version}"
    prefix.mkdir(parents=True, exist_ok=True)
    _run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
          f"{spec.package}@{version}"])
    return prefix


def refresh(specs: Sequence[ServerSpec], corpus: Path) -> None:
    """Install and read every version of every server; pin what they serve."""
    with tempfile.TemporaryDirectory(prefix="lockstep-churn-") as scratch_root:
        root = Path(scratch_root)
        scratch = root / "scratch"
        (scratch / "repo").mkdir(parents=True)
        _run(["git", "init", "-q", str(scratch / "repo")])
        env = {**os.environ, "TZ": "UTC", "HOME": str(scratch)}
        for spec in specs:
            for version in spec.versions:
                target = corpus / spec.name / f"{version}.json"
                try:
                    install = _install_pypi if spec.registry == "pypi" else _install_npm
                    prefix = install(spec, version, root)
                    try:
                        document = asyncio.run(read_interface(spec.command(prefix, scratch), env))
                    except ReadError:
                        if spec.registry != "pypi":
                            raise
                        _pin_sdk_1(prefix)
                        document = asyncio.run(read_interface(spec.command(prefix, scratch), env))
                except (subprocess.CalledProcessError, ReadError, OSError, TimeoutError, KeyError) as error:
                    detail = getattr(error, "stderr", b"") or b""
                    print(f"skip {spec.name} {version}: {error} {detail.decode(errors='replace')[-300:]}",
                          file=sys.stderr)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
                print(f"pinned {spec.name} {version}: {sum(len(v) for v in document.values() if isinstance(v, list))}"
                      " components", file=sys.stderr)
            shutil.rmtree(root / f"venv-{spec.name}", ignore_errors=True)


# --------------------------------------------------------------------------- measuring

def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def pinned_versions(corpus: Path) -> dict[str, list[Path]]:
    servers = {}
    for folder in sorted(path for path in corpus.iterdir() if path.is_dir()):
        files = sorted(folder.glob("*.json"), key=lambda path: _version_key(path.stem))
        if len(files) >= 2:
            servers[folder.name] = files
    return servers


@dataclass(frozen=True)
class Step:
    server: str
    old: str
    new: str
    findings: list[Finding]

    def count(self, severity: Severity) -> int:
        return sum(1 for finding in self.findings if finding.severity is severity)


def measure(corpus: Path) -> list[Step]:
    steps = []
    for server, files in pinned_versions(corpus).items():
        documents = [Interface.from_document(json.loads(path.read_text())) for path in files]
        for (old_path, old), (new_path, new) in zip(zip(files, documents), zip(files[1:], documents[1:])):
            steps.append(Step(server, old_path.stem, new_path.stem, diff_interfaces(old, new)))
    return steps


def print_table(steps: Sequence[Step], details: bool) -> None:
    header = f"{'server':<20} {'versions':<26} {'findings':>8} {'high':>5} {'medium':>6} {'low':>4}"
    print(header)
    print("-" * len(header))
    for step in steps:
        print(f"{step.server:<20} {step.old + ' -> ' + step.new:<26} {len(step.findings):>8} "
              f"{step.count(Severity.HIGH):>5} {step.count(Severity.MEDIUM):>6} {step.count(Severity.LOW):>4}")
        if details:
            for finding in step.findings:
                print(f"    {finding.change.value:<7} {finding.kind.value}/{finding.name} [{finding.severity.value}]")
                for reason in finding.reasons:
                    print(f"        {reason}")
    total = [finding for step in steps for finding in step.findings]
    by_severity = Counter(finding.severity for finding in total)
    print("-" * len(header))
    print(f"{'total':<20} {str(len(steps)) + ' version steps':<26} {len(total):>8} {by_severity[Severity.HIGH]:>5} "
          f"{by_severity[Severity.MEDIUM]:>6} {by_severity[Severity.LOW]:>4}")
    for change in ("added", "changed", "removed"):
        subset = [finding for finding in total if finding.change.value == change]
        highs = sum(1 for finding in subset if finding.severity is Severity.HIGH)
        share = f"{100 * highs / len(subset):.0f}%" if subset else "-"
        print(f"{change + ' components':<20} {'':<26} {len(subset):>8} {highs:>5}  ({share} high)")
    text_highs = [finding for finding in total if finding.change.value == "changed"
                  and any(" gains " in reason for reason in finding.reasons)]
    print(f"changed components made high by the text rules: {len(text_highs)}")
    high_reasons = Counter(_reason_class(reason) for finding in total if finding.severity is Severity.HIGH
                           for reason in finding.reasons if _is_high_reason(reason))
    if high_reasons:
        print("\nwhat made findings high (reason classes, counted per reason):")
        for reason, count in high_reasons.most_common():
            print(f"  {count:>4}  {reason}")


def _is_high_reason(reason: str) -> bool:
    return any(marker in reason for marker in (" gains ", "new tool", "widened schema", "read-only",
                                              "destructive", "open-world"))


def _reason_class(reason: str) -> str:
    if reason.startswith("widened schema:"):
        detail = reason.split(": ", 1)[1]
        for marker in ("added (accepts a new property)", "no longer requires", "type", "enum", "removed",
                       "loosened", "changed"):
            if marker in detail:
                return f"widened schema: {marker}"
        return "widened schema: other"
    if " gains " in reason:
        gained = reason.split(" gains ", 1)[1]
        for marker in ("invisible", "bidirectional", "tag", "look-alike", "markup", "instruction-like", "URL"):
            if gained.startswith(marker):
                label = gained.split("'")[1] if marker == "instruction-like" and "'" in gained else ""
                return f"text gains {marker}" + (f" ({label})" if label else "")
    return reason


def measure_cost(tools: int = 1000, repeats: int = 3) -> None:
    """Time the worst case: every tool of a large interface changed (description and schema)."""
    import copy
    import statistics
    import time

    description = "Get the forecast for a city and the days ahead. " * 20
    old: dict[str, Any] = {"tools": [{"name": f"tool_{i}", "description": f"{i} {description}", "inputSchema": {
        "type": "object", "required": ["p0"], "properties": {
            f"p{j}": {"type": "string", "maxLength": 100, "description": f"parameter {i}.{j} " * 8}
            for j in range(20)}}} for i in range(tools)]}
    new = copy.deepcopy(old)
    for tool in new["tools"]:
        tool["description"] += " Now faster."
        tool["inputSchema"]["properties"]["p1"]["maxLength"] = 200
    size = len(json.dumps(new)) / 1e6
    approved, observed = Interface.from_document(old), Interface.from_document(new)
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        findings = diff_interfaces(approved, observed)
        timings.append(time.perf_counter() - start)
    print(f"\ncost: {tools} tools ({size:.1f} MB), every one changed: {len(findings)} findings, "
          f"median {statistics.median(timings) * 1000:.0f} ms; unchanged: ", end="")
    start = time.perf_counter()
    diff_interfaces(approved, approved)
    print(f"{(time.perf_counter() - start) * 1000:.0f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refresh", action="store_true", help="install, read and pin every listed version")
    parser.add_argument("--only", action="append", default=[], help="refresh only this server (repeatable)")
    parser.add_argument("--details", action="store_true", help="print every finding and its reasons")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--cost", action="store_true", help="also time the diff of a large, fully changed interface")
    options = parser.parse_args(argv)
    if options.refresh:
        specs = [spec for spec in SERVERS if not options.only or spec.name in options.only]
        refresh(specs, options.corpus)
    print_table(measure(options.corpus), options.details)
    if options.cost:
        measure_cost()
    return 0


if __name__ == "__main__":
    sys.exit(main())
