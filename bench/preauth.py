"""Benchmark of the report endpoint before identity: slow connections from one address against one replica.

The operator runs as a real ``lockstep operator`` process against kmock (as bench/operator.py runs it);
this process opens ``--connections`` TLS connections from one address (127.0.0.1) and holds them, in one of
three ways, while a genuine sidecar (the pod's own token) sends reports:

  unknown-token  headers with a token no TokenReview vouches for and ``Content-Length: 4 MiB``, then the body
                 one byte a second (before issue 25 the relay path read such bodies before any review)
  valid-token    the same with the pod's own token (what a namespace editor could mint before issue 25):
                 the body read starts after the review and is cut off at ``body_read_timeout``
  idle           a TLS connection that never sends a request line

Printed per attack: the operator's RSS before and while held, the genuine report's time to its 202 (median
of ``--reports``) next to the same without an attack (the ratio), what the held connections were answered,
and how many connections the operator refused at its per-source limit. Usage::

    python bench/preauth.py                     # 100 connections, each attack, 10 genuine reports
    python bench/preauth.py --connections 300   # past the per-source limit (256 by default)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import kmock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lockstep_testing.kmock_support import Emulator, TokenBook, declare_resources, jwt_shaped, make_tls_files
from scripts import load_script
from tables import print_table

from lockstep import __version__
from lockstep.core import Interface
from lockstep.core.report import Freshness, Observation
from lockstep.core.revision import Revision

NAMESPACE = "bench"
INTERFACE = {"tools": [{"name": "lookup", "description": "Look up.", "inputSchema": {"type": "object"}}]}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Genuine:
    """The pod's sidecar: stamped reports with its own token."""

    def __init__(self, url: str, token: str, context: ssl.SSLContext) -> None:
        self.url, self.token, self.context = url, token, context
        self.boot = datetime.datetime.now(datetime.UTC).isoformat()
        self.sequence = 0

    async def report(self) -> tuple[int, float]:
        self.sequence += 1
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {**Observation.of_interface(Interface.from_document(INTERFACE), now).to_dict(),
                **Freshness("0123456789abcdef0123456789abcdef", self.boot, self.sequence,
                            datetime.datetime.now(datetime.UTC).isoformat(), sidecar_version=__version__)
                .to_dict()}
        started = time.perf_counter()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.context)) as session, \
                session.post(f"{self.url}/v1/reports", json=body,
                             headers={"Authorization": f"Bearer {self.token}"}) as response:
            text = await response.read()
            if response.status != 202:
                raise RuntimeError(f"the genuine report was answered {response.status}: {text[:300]!r}")
            return response.status, time.perf_counter() - started


async def hold(port: int, context: ssl.SSLContext, kind: str, token: str, answers: list[str],
               stop: asyncio.Event) -> None:
    """One held connection; records the first line of whatever the operator answers ('' = closed)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    except OSError as error:
        answers.append(f"connect failed: {type(error).__name__}")
        return
    try:
        if kind != "idle":
            writer.write((f"POST /v1/reports HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {4 * 1024 * 1024}\r\n\r\n{{").encode())
            await writer.drain()
        read = asyncio.create_task(reader.readline())
        while not stop.is_set() and not read.done():
            await asyncio.wait([read], timeout=1.0)
            if kind != "idle" and not read.done():
                with contextlib.suppress(OSError, ConnectionError):
                    writer.write(b" ")  # one byte a second
                    await writer.drain()
        if read.done():
            with contextlib.suppress(Exception):
                answers.append(read.result().decode(errors="replace").strip()[:40] or "closed")
        else:
            read.cancel()
            answers.append("still held")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def run(connections: int, reports: int, hold_seconds: float) -> list[list[str]]:
    bench_operator = load_script("operator")
    rows = []
    async with Emulator(history=False) as emulator, kmock.Server(emulator):
        declare_resources(emulator)
        tokens = TokenBook(emulator)
        revision = Revision.of(Interface.from_document(INTERFACE))
        await bench_operator.create_all(emulator, [{
            "apiVersion": "lockstep.dev/v1alpha1", "kind": "MCPServerInterface",
            "metadata": {"name": "server", "namespace": NAMESPACE, "uid": "uid-r", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "server"}}, "enforcement": "Isolate", "approval": "Manual",
                     "probe": {"interval": "60s", "timeout": "10s", "staleAfter": "1h"},
                     "approved": [revision.to_spec()]}}],
            f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces")
        await bench_operator.create_all(emulator, [{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": NAMESPACE, "uid": "uid-p1", "resourceVersion": "1",
                         "labels": {"app": "server"}},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}}],
            f"/api/v1/namespaces/{NAMESPACE}/pods")
        pod_token = tokens.issue(NAMESPACE, "p1", "uid-p1")
        with tempfile.TemporaryDirectory() as folder:
            tls = make_tls_files(Path(folder))
            kubeconfig = Path(folder) / "kubeconfig"
            kubeconfig.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": str(emulator.url).rstrip("/")}}],
                "users": [{"name": "bench", "user": {"token": "bench"}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "bench"}}]}))
            port, metrics = bench_operator.free_port(), bench_operator.free_port()
            context = ssl.create_default_context(cafile=str(tls.cert))
            async with bench_operator.operator_process(kubeconfig, Path(folder), port, metrics, tls) as pid:
                genuine = Genuine(f"https://127.0.0.1:{port}", pod_token, context)
                await genuine.report()  # the first report: TokenReview, Verified written
                quiet = [(await genuine.report())[1] for _ in range(reports)]
                baseline = statistics.median(quiet)
                rows.append(["none", "0", f"{rss_mb(pid):.0f}", f"{rss_mb(pid):.0f}", f"{baseline * 1000:.1f}",
                             "1.00", "-", "-"])
                for kind in ("unknown-token", "valid-token", "idle"):
                    token = pod_token if kind == "valid-token" else jwt_shaped({"sub": "nobody", "n": kind})
                    before = rss_mb(pid)
                    stop, answers = asyncio.Event(), []
                    held = [asyncio.create_task(hold(port, context, kind, token, answers, stop))
                            for _ in range(connections)]
                    await asyncio.sleep(2.0)
                    timed = []
                    for _ in range(reports):
                        status, seconds = await genuine.report()
                        assert status == 202, status
                        timed.append(seconds)
                    await asyncio.sleep(max(0.0, hold_seconds - 2.0))
                    during = rss_mb(pid)
                    stop.set()
                    await asyncio.gather(*held)
                    refused = await _refused(metrics)
                    median = statistics.median(timed)
                    outcome = ", ".join(f"{count}x {answer}" for answer, count in
                                        sorted({a: answers.count(a) for a in answers}.items(), key=lambda x: -x[1]))
                    rows.append([kind, str(connections), f"{before:.0f}", f"{during:.0f}", f"{median * 1000:.1f}",
                                 f"{median / baseline:.2f}", outcome, refused])
    return rows


async def _refused(metrics_port: int) -> str:
    """The rejections the operator counted so far, by reason (its /metrics)."""
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
        text = await response.text()
    counts = []
    for line in text.splitlines():
        if line.startswith("lockstep_reports_rejected_total{") and not line.endswith(" 0.0"):
            reason = line.split('reason="')[1].split('"')[0]
            counts.append(f"{reason} {float(line.rsplit(' ', 1)[1]):.0f}")
    return ", ".join(counts) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--reports", type=int, default=10, help="genuine reports timed per attack")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds each attack holds its connections")
    args = parser.parse_args()
    rows = asyncio.run(run(args.connections, args.reports, args.hold))
    header = ["attack", "connections", "RSS before MiB", "RSS held MiB", "genuine 202 p50 ms", "ratio",
              "held connections answered", "rejections so far"]
    print_table(header, rows)


if __name__ == "__main__":
    main()
