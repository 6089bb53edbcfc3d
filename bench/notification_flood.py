"""Benchmark: the sidecar's CPU while an MCP server floods it with list_changed notifications.

The sidecar runs as its own process (``lockstep sidecar``), probing a real ``mcp`` SDK server on
127.0.0.1 that sends ``notifications/tools/list_changed`` at a target rate for ``--seconds``; an HTTPS
stand-in records the reports. It prints, per rate: notifications sent, the sidecar's CPU (% of one core,
from /proc), its flood counter and the probes it made. Past 100 notifications a second the sidecar
closes the session and reconnects after a backoff, so its CPU stays bounded.

    python bench/notification_flood.py [--rates 10,100,1000,max] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lockstep_testing.loopback import McpServerHandle, OperatorStandIn, make_certificates, sidecar_env
from lockstep_testing.mcp_servers import MutableServer, make_tools


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def metric(port: int, name: str) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def one_rate(rate: float | None, seconds: float, folder: Path) -> tuple[int, float, float, float]:
    server = MutableServer(tools=make_tools(3), instructions="Flood.")
    mcp = McpServerHandle(server)
    await mcp.start()
    certificates = make_certificates(folder)
    token = folder / "token"
    token.write_text("token\n")
    try:
        async with OperatorStandIn(certificates).serving() as operator:
            port = free_port()
            env = {**os.environ, **sidecar_env(mcp.url, operator.url, certificates.ca_pem, token, interval=3600),
                   "LOCKSTEP_SIDECAR_PORT": str(port)}
            process = await asyncio.create_subprocess_exec(sys.executable, "-m", "lockstep.cli", "sidecar", env=env,
                                                           stdout=asyncio.subprocess.DEVNULL,
                                                           stderr=asyncio.subprocess.DEVNULL)
            try:
                while not operator.reports:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                before = cpu_seconds(process.pid)
                started, sent = time.perf_counter(), 0
                while (elapsed := time.perf_counter() - started) < seconds:
                    await server.notify("tools")
                    sent += 1
                    if rate is not None:
                        await asyncio.sleep(max(0.0, started + sent / rate - time.perf_counter()))
                elapsed = time.perf_counter() - started
                cpu = (cpu_seconds(process.pid) - before) / elapsed * 100
                floods = await metric(port, "lockstep_sidecar_list_changed_floods_total")
                probes = await metric(port, 'lockstep_sidecar_probes_total{result="ok"}')
                return sent, cpu, floods, probes
            finally:
                process.terminate()
                await process.wait()
    finally:
        await mcp.stop()


async def main(rates: list[str], seconds: float) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for index, rate in enumerate(rates):
            target = None if rate == "max" else float(rate)
            sent, cpu, floods, probes = await one_rate(target, seconds, Path(folder) / str(index))
            rows.append((rate, sent, sent / seconds, cpu, floods, probes))
    print(f"list_changed flood against a sidecar process, {seconds:g} s per rate (CPU in % of one core)")
    print(f"{'target/s':>9} {'sent':>7} {'sent/s':>8} {'sidecar CPU':>12} {'floods':>7} {'probes':>7}")
    for rate, sent, per_second, cpu, floods, probes in rows:
        print(f"{rate:>9} {sent:>7} {per_second:>8.0f} {cpu:>11.0f}% {floods:>7.0f} {probes:>7.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="10,100,1000,max")
    parser.add_argument("--seconds", type=float, default=5.0)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rates.split(","), arguments.seconds))
