"""Benchmark: what does the sidecar cost a pod?

Run it with ``python bench/sidecar_footprint.py`` (``--idle S`` for the idle window, default 30;
``--interval S`` for the probe interval, default 60 as in production). It serves a real MCP server
(``mcp`` SDK, 3 tools, 2 prompts, 2 resources) and an HTTPS stand-in for the operator's report
endpoint on 127.0.0.1 in this process, then starts ``python -m lockstep.cli sidecar`` as a separate
process with the environment the webhook would inject, and measures that process only:

- start to first report: from spawning the process to the first report arriving at the endpoint
  (interpreter start, imports, connect, initialize, every list, digest, TLS, POST);
- RSS after the first report and at the end of the idle window, and the peak (VmHWM);
- CPU time used over the idle window (user + system), as a share of one core;
- time from SIGTERM to exit (the pod's termination waits for it).

Targets: RSS under 60 MB, idle CPU near zero.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from lockstep_testing.loopback import McpServerHandle, OperatorStandIn, make_certificates, sidecar_env
from lockstep_testing.mcp_servers import MutableServer, make_prompts, make_resources, make_tools

TICKS = os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def measure(idle: float, interval: float) -> dict[str, float]:
    mcp = McpServerHandle(MutableServer(tools=make_tools(3), prompts=make_prompts(2), resources=make_resources(2),
                                        instructions="Weather tools."))
    await mcp.start()
    with tempfile.TemporaryDirectory() as folder:
        certificates = make_certificates(Path(folder))
        token = Path(folder) / "token"
        token.write_text("bench-token")
        try:
            async with OperatorStandIn(certificates).serving() as operator:
                env = {**os.environ, **sidecar_env(mcp.url, operator.url, certificates.ca_pem, token,
                                                   interval=interval)}
                started = time.monotonic()
                level = os.environ.get("BENCH_LOG_LEVEL", "WARNING")
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "lockstep.cli", "sidecar", "--log-level", level, env=env)
                try:
                    while not operator.reports:
                        if process.returncode is not None:
                            raise RuntimeError(f"the sidecar exited with {process.returncode}")
                        await asyncio.sleep(0.005)
                    first_report = operator.reports[0].received - started
                    await asyncio.sleep(2.0)  # let the first report's garbage settle
                    rss_after_first = memory_kib(process.pid, "VmRSS")
                    cpu_before = cpu_seconds(process.pid)
                    await asyncio.sleep(idle)
                    cpu_idle = cpu_seconds(process.pid) - cpu_before
                    rss_idle = memory_kib(process.pid, "VmRSS") / 1024
                    rss_peak = memory_kib(process.pid, "VmHWM") / 1024
                    stopping = time.monotonic()
                    process.terminate()
                    await asyncio.wait_for(process.wait(), 10)
                    return {"stop_s": time.monotonic() - stopping, "first_report_s": first_report, "rss_first_mib": rss_after_first / 1024,
                            "rss_idle_mib": rss_idle, "rss_peak_mib": rss_peak,
                            "idle_cpu_s": cpu_idle, "idle_cpu_pct": 100 * cpu_idle / idle,
                            "reports": len(operator.reports)}
                finally:
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
        finally:
            await mcp.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=30.0, help="idle window (s)")
    parser.add_argument("--interval", type=float, default=60.0, help="probe interval (s)")
    arguments = parser.parse_args()
    result = asyncio.run(measure(arguments.idle, arguments.interval))
    print(f"lockstep sidecar footprint (probe interval {arguments.interval:g}s, idle window {arguments.idle:g}s)")
    print(f"{'start to first report':<28} {result['first_report_s'] * 1e3:8.0f} ms")
    print(f"{'RSS after first report':<28} {result['rss_first_mib']:8.1f} MiB")
    print(f"{'RSS after idle window':<28} {result['rss_idle_mib']:8.1f} MiB")
    print(f"{'RSS peak (VmHWM)':<28} {result['rss_peak_mib']:8.1f} MiB")
    print(f"{'CPU over idle window':<28} {result['idle_cpu_s'] * 1e3:8.0f} ms ({result['idle_cpu_pct']:.2f}% of a core)")
    print(f"{'reports received':<28} {result['reports']:8.0f}")
    print(f"{'SIGTERM to exit':<28} {result['stop_s'] * 1e3:8.0f} ms")


if __name__ == "__main__":
    main()
