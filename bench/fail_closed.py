"""Benchmark of the fail-closed write: how soon a False lands once the API server takes writes again.

The real operator (on a thread, against kmock) verifies a pod; then every pods/status write it sends is
answered with an error (409, 422 and 500 in turn) for ``--outage`` seconds while the pod's sidecar reports a
rug pull. When the API takes writes again, the time until the pod carries the False is measured. Before
issue 25 such a False was dropped: the pod stayed Ready until the next report (a silent sidecar: for ever).

Printed per round: the writes refused during the outage, the time from recovery to the False on the pod
(compare with ``write_retry_interval``, 1 s by default), and the writes it took after recovery::

    python bench/fail_closed.py                   # 5 rounds, 3 s outages, the default retry interval
    python bench/fail_closed.py --retry 0.2       # a shorter retry interval
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kmock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from lockstep_testing.kmock_support import (
    POISON,
    TOOLS,
    Emulator,
    TokenBook,
    create_objects,
    declare_resources,
    make_pod,
    make_resource,
    make_tls_files,
    operator_config,
    run_operator,
    sidecar_for,
    verdict_of,
)
from lockstep_testing.polling import eventually

from tables import print_table

from lockstep.core.model import Interface
from lockstep.core.report import Observation
from lockstep.operator.kube import KubeApiError

GOOD = {"tools": TOOLS}
BAD = {"tools": [TOOLS[0], {**TOOLS[1], "description": POISON}]}


def report(document: dict[str, Any]) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Observation.of_interface(Interface.from_document(document), now).to_dict()


async def run(rounds: int, outage: float, retry: float) -> list[list[str]]:
    rows = []
    async with Emulator() as emulator, kmock.Server(emulator):
        declare_resources(emulator)
        tokens = TokenBook(emulator)
        await create_objects(emulator, make_resource([GOOD]), make_pod("p1"))
        with tempfile.TemporaryDirectory() as folder:
            tls = make_tls_files(Path(folder))
            async with run_operator(emulator, operator_config(tls, write_retry_interval=retry)) as operator:
                reconciler = operator.operator.reconciler
                assert reconciler is not None
                client, original = reconciler.client, reconciler.client.merge_patch
                refused: list[int] = []
                state = {"down": False, "after": 0}

                async def flaky(path: str, body: dict[str, Any]) -> Any:
                    if path.endswith("/status") and "/pods/" in path:
                        if state["down"]:
                            status = (409, 422, 500)[len(refused) % 3]
                            refused.append(status)
                            raise KubeApiError(status, f"injected {status}")
                        state["after"] += 1
                    return await original(path, body)

                client.merge_patch = flaky  # type: ignore[method-assign]
                for index in range(rounds):
                    sidecar = sidecar_for(operator, tokens, tls, "p1")
                    status, answer = await sidecar.post(report(GOOD))
                    assert answer["verdict"]["reason"] == "Verified", answer
                    refused.clear()
                    state["down"], state["after"] = True, 0
                    status, answer = await sidecar.post(report(BAD))
                    assert (status, answer["reason"]) == (503, "NotWritten"), (status, answer)
                    await asyncio.sleep(outage)
                    assert verdict_of(emulator, "p1") == ("True", "Verified")  # not written yet
                    state["down"] = False
                    recovered = time.perf_counter()
                    await eventually(lambda: verdict_of(emulator, "p1") == ("False", "InterfaceChanged"),
                                   timeout=30, interval=0.005)
                    lag = time.perf_counter() - recovered
                    rows.append([str(index + 1), f"{outage:g}", str(len(refused)), f"{retry:g}",
                                 f"{lag * 1000:.0f}", str(state["after"])])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--outage", type=float, default=3.0, help="seconds every pods/status write is refused")
    parser.add_argument("--retry", type=float, default=1.0, help="the operator's write_retry_interval")
    args = parser.parse_args()
    rows = asyncio.run(run(args.rounds, args.outage, args.retry))
    header = ["round", "outage s", "writes refused", "retry interval s", "recovery -> False ms",
              "writes after recovery"]
    lags = [float(row[4]) for row in rows]
    print_table(header, rows)
    print(f"recovery -> False: median {statistics.median(lags):.0f} ms, max {max(lags):.0f} ms "
          f"(retry interval {args.retry * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
