"""How fast the light CLI commands start (issue 27 item 6): ``lockstep --help``, ``hash FILE``, ``diff FILE FILE``
and ``verify --help`` (and ``check --help``) each run ``--runs`` times as a new process of the installed entry
point (the ``lockstep`` script beside this interpreter), median and best wall time, beside a bare
``python -c pass`` (the interpreter's own start, which no command can beat) and kubectl's answer (about 50 ms).
Columns: the median, the best, the median over the interpreter's (what Lockstep's imports cost), and the
ratio of the median to the interpreter's. The target is a median under 150 ms; the machine is shared and
noisy, so read medians of many runs.

The gate is not this table but tests/cli/test_startup.py, which ``make test`` (CI, every pull request) runs:
it fails when one of these commands imports kopf, aiohttp, the kubernetes client or the mcp SDK, the
imports that made them take 0.6-0.8 s.

    python bench/cli_startup.py            # 21 runs each
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tables import print_table

COMMANDS = [["--help"], ["hash", "{file}"], ["diff", "{file}", "{file}"], ["verify", "--help"], ["check", "--help"]]
TARGET_MS = 150


def timed(argv: list[str], runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        seconds.append(time.perf_counter() - started)
    return seconds


def lockstep_argv() -> list[str]:
    """The installed ``lockstep`` script of this interpreter's environment, else ``python -m lockstep.cli``."""
    script = Path(sys.executable).parent / "lockstep"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "lockstep.cli"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    lockstep = lockstep_argv()
    print(f"{' '.join(lockstep)}, {args.runs} runs each, target: median under {TARGET_MS} ms\n")
    with tempfile.TemporaryDirectory() as folder:
        interface = Path(folder) / "interface.json"
        interface.write_text(json.dumps({"tools": [{"name": "a", "description": "A.",
                                                    "inputSchema": {"type": "object"}}]}))
        floor_runs = timed([sys.executable, "-c", "pass"], args.runs)
        floor = statistics.median(floor_runs)
        rows = [["python -c pass", f"{floor * 1000:.0f}", f"{min(floor_runs) * 1000:.0f}", "-", "1.0x"]]
        kubectl = shutil.which("kubectl")
        measured = [("kubectl version --client", [kubectl, "version", "--client"])] if kubectl else []
        measured += [(f"lockstep {' '.join(command).replace('{file}', 'FILE')}",
                      [*lockstep, *(part.format(file=interface) for part in command)]) for command in COMMANDS]
        for label, argv in measured:
            seconds = timed(argv, args.runs)
            median = statistics.median(seconds)
            rows.append([label, f"{median * 1000:.0f}", f"{min(seconds) * 1000:.0f}",
                         f"{(median - floor) * 1000:.0f}", f"{median / floor:.1f}x"])
    print_table(["command", "median ms", "best ms", "over the interpreter ms", "ratio to the interpreter"], rows)


if __name__ == "__main__":
    main()
