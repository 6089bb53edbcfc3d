"""How fast the light CLI commands start (issue 27 item 6): each command run ``--runs`` times as a new
process, median and best wall time, beside a bare ``python -c pass`` (the interpreter's own start, which no
command can beat) and the difference between them (what Lockstep's imports cost).

    python bench/cli_startup.py            # 15 runs each
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tables import print_table

COMMANDS = [["--help"], ["hash", "{file}"], ["diff", "{file}", "{file}"], ["verify", "--help"], ["check", "--help"]]


def timed(argv: list[str], runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        interface = Path(folder) / "interface.json"
        interface.write_text(json.dumps({"tools": [{"name": "a", "description": "A.",
                                                    "inputSchema": {"type": "object"}}]}))
        floor = statistics.median(timed([sys.executable, "-c", "pass"], args.runs))
        rows = [["python -c pass", f"{floor * 1000:.0f}", "", "-"]]
        for command in COMMANDS:
            argv = [sys.executable, "-m", "lockstep.cli", *(part.format(file=interface) for part in command)]
            seconds = timed(argv, args.runs)
            median = statistics.median(seconds)
            rows.append([f"lockstep {' '.join(command).replace('{file}', 'FILE')}", f"{median * 1000:.0f}",
                         f"{min(seconds) * 1000:.0f}", f"{(median - floor) * 1000:.0f}"])
    print_table(["command", "median ms", "best ms", "over the interpreter ms"], rows)


if __name__ == "__main__":
    main()
