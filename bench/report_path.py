"""The report path in process: Lockstep's own work per report, without the transport and without the API.

``ReportServer._judge`` and the 202's encoding for N x M pods (bench/operator.py's resources, pods and
reports), with a stub API client that takes every write, a TokenReviewer whose cache knows every pod's
token, and no HTTP: what the operator spends on a report beyond the HTTPS floor (bench/floors.py) and the
API's work. Two modes: ``digests``, steady reports as today's sidecar sends an unchanged interface, and
``drift``, full reports that change the pod's verdict every time (drifted, then approved again), the
condition written to the stub. Prints CPU and wall time per report; with ``--profile``, the Python function
calls and the event-loop turns per report (exact, whatever the machine's load) and the top of a cProfile.

Uses the operator's internals; it runs against any tree from v0.2.0 on, each with its own interpreter (copy it
there with bench/scripts.py, which loads that tree's bench/operator.py)::

    python bench/report_path.py --mode digests --rounds 3
    python bench/report_path.py --mode drift --rounds 2 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import hashlib
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from scripts import load_script

from lockstep import __version__
from lockstep.core.report import Freshness
from lockstep.operator.cache import PodRecord
from lockstep.operator.config import OperatorConfig
from lockstep.operator.metrics import Metrics
from lockstep.operator.reconciler import Reconciler
from lockstep.operator.reports import Identity, ReportServer, TokenReviewer


class StubClient:
    """Takes every write (answers no body: the operator keeps its own record of the pod)."""

    def pod_status_path(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{name}/status"

    async def merge_patch(self, path: str, patch: Any) -> dict[str, Any]:
        return {}

    async def post(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    async def token_review(self, *args: Any) -> dict[str, Any]:
        raise AssertionError("every token is in the reviewer's cache")


class StubEvents:
    async def post(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def flush(self, *args: Any, **kwargs: Any) -> None:
        pass


class StubRequest:
    """What ReportServer._judge reads of an aiohttp request: a report whose body has all arrived."""

    class content:
        @staticmethod
        def is_eof() -> bool:
            return True

    def __init__(self, token: str, body: bytes) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}
        self.content_length = len(body)
        self.remote = "127.0.0.1"
        self._body = body

    async def read(self) -> bytes:
        return self._body


async def run(mode: str, rounds: int, resources: int, replicas: int, profile: bool) -> None:
    bench = load_script("operator")  # its resources, pods and report bodies
    config = OperatorConfig(rate_per_pod=100, rate_burst=100, source_rate=0)
    metrics = Metrics()
    reconciler = Reconciler(config, StubClient(), metrics, StubEvents())  # type: ignore[arg-type]
    for index in range(resources):
        reconciler._put_resource(bench.resource(index))
        for replica in range(replicas):
            reconciler.cache.put_pod(PodRecord.from_body(bench.pod(index, replica)))
    reconciler.synced.set()
    reviewer = TokenReviewer(StubClient(), 300)  # type: ignore[arg-type]
    server = ReportServer(config, reconciler, reviewer, metrics)
    pods: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # token, drifted report, approved report
    for index in range(resources):
        drifted, approved = bench.report_body(index, True), bench.report_body(index, False)
        for replica in range(replicas):
            name = f"server-{index}-{replica}"
            token = f"eyJ{hashlib.sha256(name.encode()).hexdigest() * 12}.eyJ{'a' * 600}.sig{'b' * 300}"
            reviewer._cache[hashlib.sha256(token.encode()).hexdigest()] = (  # reviewed, for as long as the run
                time.monotonic() + 1e6, Identity(bench.NAMESPACE, name, f"uid-{name}"))
            pods.append((token, drifted, approved))

    def stamped(token: str, report: dict[str, Any]) -> bytes:
        freshness = Freshness(hashlib.sha256(token.encode()).hexdigest()[:32], bench.BOOT_TIME,
                              time.time_ns() // 1000, datetime.datetime.now(datetime.UTC).isoformat(),
                              sidecar_version=__version__)
        return json.dumps({**report, **freshness.to_dict()}).encode()

    for token, drifted, _ in pods:  # every pod's first report, in full (the definitions held for digests)
        await server._judge(StubRequest(token, stamped(token, drifted)))
    requests = []
    for round_ in range(rounds):
        for token, drifted, approved in pods:
            if mode == "digests":
                report = bench.digests_only(drifted)
            else:
                report = drifted if round_ % 2 else approved
            requests.append(StubRequest(token, stamped(token, report)))
    profiler = cProfile.Profile() if profile else None
    started, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    for request in requests:
        answer = await server._judge(request)
        server._accepted(answer)
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    count = len(requests)
    print(f"{mode}: {count} reports, {cpu / count * 1e6:.1f} us CPU and {wall / count * 1e6:.1f} us wall each "
          f"(last verdict {answer.verdict.reason})")
    if profiler:
        stats = pstats.Stats(profiler)
        turns = sum(value[1] for key, value in stats.stats.items() if key[2] == "_run_once")  # type: ignore[attr-defined]
        print(f"Python function calls per report: {stats.total_calls / count:.0f}; "  # type: ignore[attr-defined]
              f"event-loop turns per report: {turns / count:.2f}")
        stats.sort_stats("cumulative").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["digests", "drift"], default="digests")
    parser.add_argument("--rounds", type=int, default=3, help="reports per pod")
    parser.add_argument("--sizes", default="100x10", help="resources x pods per resource")
    parser.add_argument("--profile", action="store_true", help="count calls and loop turns; print a cProfile")
    args = parser.parse_args()
    resources, replicas = (int(part) for part in args.sizes.split("x"))
    asyncio.run(run(args.mode, args.rounds, resources, replicas, args.profile))


if __name__ == "__main__":
    main()
