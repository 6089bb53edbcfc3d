"""The floors under Lockstep's per-report costs on this machine, measured without Lockstep.

1. API server: the kube-apiserver + etcd CPU of one pods/status merge patch of the readiness-gate
   condition, the one write a verdict change needs, sent at 200/s with no operator running (the real
   control plane of KUBEBUILDER_ASSETS, kube-controller-manager included, as in bench/operator.py).
2. Report endpoint: the CPU of an aiohttp HTTPS server that reads a digest-only report's body, parses
   its JSON and answers a 202 JSON (nothing else), at 200 requests/s from another process.

bench/operator.py's "API CPU per verdict change" and "operator CPU per steady report" compare with
these: what Lockstep adds is the difference. Usage::

    KUBEBUILDER_ASSETS="$(../shared/envtest/install)" python bench/floors.py
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lockstep_testing.control_plane import assets_folder, start_control_plane
from lockstep_testing.kmock_support import make_tls_files

RATE = 200.0
COUNT = 1000
CONDITION = "lockstep.dev/interface-verified"
REPORT = json.dumps({
    "observedAt": "2026-11-25T10:00:00Z", "bootId": "c" * 32, "bootTime": "2026-11-25T09:00:00+00:00",
    "sequence": 5, "sentAt": "2026-11-25T10:00:00Z",
    "digest": {"digest": "sha256:" + "a" * 64, "formula": "lockstep-jcs-sha256-v1",
               "components": [{"kind": "tool", "name": f"tool-{i}", "digest": "sha256:" + "b" * 64}
                              for i in range(2)]}}).encode()


def process_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def open_loop(count: int, send: Any) -> float:
    """Send ``count`` requests at RATE/s; the seconds it took (with the last answers)."""
    began, tasks = time.perf_counter(), []
    for index in range(count):
        delay = began + index / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(index)))
    await asyncio.gather(*tasks)
    return time.perf_counter() - began


async def idle_rate(pids: list[int], seconds: float = 5.0) -> float:
    before, began = process_cpu(pids), time.perf_counter()
    await asyncio.sleep(seconds)
    return (process_cpu(pids) - before) / (time.perf_counter() - began)


async def api_floor() -> list[list[str]]:
    assets = assets_folder()
    if assets is None:
        raise SystemExit("needs KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager)")
    rows = []
    with tempfile.TemporaryDirectory() as folder, start_control_plane(Path(folder), assets) as plane:
        context = plane.ssl_context()
        context.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=32)) as session:
            async def call(method: str, path: str, body: Any, content_type: str = "application/json") -> None:
                async with session.request(method, f"{plane.server}{path}", data=json.dumps(body),
                                           headers={"Content-Type": content_type}) as answer:
                    assert answer.status < 300, await answer.text()

            await call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": "floor"}})
            gate = asyncio.Semaphore(32)

            async def create(index: int) -> None:
                async with gate:
                    await call("POST", "/api/v1/namespaces/floor/pods", {
                        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{index}"},
                        "spec": {"containers": [{"name": "server", "image": "example.com/mcp:1"}],
                                 "readinessGates": [{"conditionType": CONDITION}]}})

            await asyncio.gather(*(create(index) for index in range(COUNT)))
            pids = [process.popen.pid for process in plane._processes[:2]]  # etcd, kube-apiserver
            await asyncio.sleep(3)
            idle = await idle_rate(pids)
            for status, reason in (("True", "Verified"), ("False", "InterfaceChanged")):
                async def patch(index: int, status: str = status, reason: str = reason) -> None:
                    await call("PATCH", f"/api/v1/namespaces/floor/pods/pod-{index}/status",
                               {"status": {"conditions": [{"type": CONDITION, "status": status, "reason": reason,
                                                           "message": "bench"}]}},
                               "application/merge-patch+json")

                before = process_cpu(pids)
                elapsed = await open_loop(COUNT, patch)
                await asyncio.sleep(1.5)
                used, window = process_cpu(pids) - before, elapsed + 1.5
                rows.append([f"pods/status PATCH to {status} (one verdict change's write)", f"{COUNT}",
                             f"{used / COUNT * 1000:.2f}", f"{(used - idle * window) / COUNT * 1000:.2f}"])
    return rows


def serve_reports(folder: str, port: int) -> None:
    async def handle(request: web.Request) -> web.Response:
        json.loads(await request.read())
        return web.json_response({"verdict": {"status": "True", "reason": "Verified", "message": ""},
                                  "digests": True}, status=202)

    app = web.Application()
    app.router.add_post("/v1/reports", handle)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(f"{folder}/tls.crt", f"{folder}/tls.key")
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=context, print=None, access_log=None)


async def http_floor(folder: str, port: int, pid: int) -> list[list[str]]:
    context = ssl.create_default_context(cafile=f"{folder}/tls.crt")
    idle = await idle_rate([pid], 3.0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=128)) as session:
        async def post(index: int) -> None:
            async with session.post(f"https://127.0.0.1:{port}/v1/reports", data=REPORT,
                                    headers={"Authorization": "Bearer " + "x" * 900,
                                             "Content-Type": "application/json"}) as answer:
                await answer.read()

        before = process_cpu([pid])
        elapsed = await open_loop(2 * COUNT, post)
        used = process_cpu([pid]) - before
    return [["HTTPS POST of a digest-only report, JSON parsed, 202 JSON answered", f"{2 * COUNT}",
             f"{used / (2 * COUNT) * 1000:.3f}", f"{(used - idle * elapsed) / (2 * COUNT) * 1000:.3f}"]]


def main() -> None:
    rows = asyncio.run(api_floor())
    folder = tempfile.mkdtemp()
    make_tls_files(Path(folder))
    port = 18999
    server = multiprocessing.get_context("spawn").Process(target=serve_reports, args=(folder, port))
    server.start()
    try:
        time.sleep(2)
        assert server.pid is not None
        rows += asyncio.run(http_floor(folder, port, server.pid))
    finally:
        server.terminate()
    header = ["floor", "requests", "CPU ms each", "net of idle"]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    print(f"at {RATE:.0f} requests/s; CPU of kube-apiserver + etcd (first rows) or of the HTTPS server (last row)")
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) if not column else cell.rjust(width)
                        for column, (cell, width) in enumerate(zip(row, widths))))


if __name__ == "__main__":
    main()
