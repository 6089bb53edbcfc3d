"""Benchmark of the status flush: what one flush of N dirty MCPServerInterfaces costs.

The operator writes a resource's status at most once per flush interval (1 s by default), whatever
the number of its pods that changed; a fleet rollout makes every resource dirty at once. This bench
runs the operator's reconciler in this process against a real control plane (kube-apiserver, etcd,
kube-controller-manager from KUBEBUILDER_ASSETS), with N resources of M pods, and times three
flushes of N dirty resources, each writing every resource's status:

  start     after the list at start: no status yet (pod counts, Pending)
  verified  every pod reported its approved interface (Verified)
  drifted   every pod reported a changed interface (Drifted, the observed revision and its findings)

The pods' conditions and Events that the reports cause (the resource Events batched over their window
too) are written before each flush and not counted.
For each flush: wall time, the reconciler's CPU (this process; nothing else runs in it meanwhile),
the API server's and etcd's CPU, and the API requests and bytes, in total and per resource::

    KUBEBUILDER_ASSETS="$(../shared/envtest/install)" python bench/status_flush.py
    python bench/status_flush.py --resources 1000 --pods 2 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from scripts import load_script

bench_operator = load_script("operator")

from lockstep.core import Interface
from lockstep.core.report import Observation
from lockstep.operator.config import OperatorConfig
from lockstep.operator.events import EventPoster
from lockstep.operator.kube import KubeClient, api_counts
from lockstep.operator.metrics import Metrics
from lockstep.operator.reconciler import Reconciler

NAMESPACE = bench_operator.NAMESPACE


def observation(index: int, drifted: bool) -> Observation:
    return Observation.of_interface(Interface.from_document(bench_operator.interface_of(index, drifted)),
                                    bench_operator.AT)


async def flush(name: str, reconciler: Reconciler, client: KubeClient, api_cpu: Any) -> dict[str, Any]:
    """One flush of every dirty resource, measured."""
    # The Events of the reports, the resource Events batched over their window included, are posted
    # before the flush: what is measured is the status writes alone.
    batched = getattr(getattr(reconciler, "verdict_events", None), "post_batched", None)
    if batched is not None:
        await batched(everything=True)
    await reconciler.events.drain()
    dirty = len(reconciler.state.dirty)
    before = api_counts(client)
    api_before, began, cpu_began = api_cpu(), time.perf_counter(), time.process_time()
    await reconciler.flush_status()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    after = api_counts(client)
    requests = {kind: count - before["requests"].get(kind, 0) for kind, count in after["requests"].items()
                if count - before["requests"].get(kind, 0)}
    sent = after["bytesSent"] - before["bytesSent"]
    received = after["bytesReceived"] - before["bytesReceived"]
    return {"flush": name, "dirty": dirty, "wall": wall, "cpu": cpu, "api_cpu": api_cpu() - api_before,
            "requests": requests, "sent": sent, "received": received}


async def run(resources: int, pods: int, rounds: int) -> list[dict[str, Any]]:
    import kopf
    from lockstep.demo.control_plane import assets_folder, start_control_plane
    from lockstep_testing.lockstep_install import install_crds

    assets = assets_folder()
    if assets is None:
        raise SystemExit("needs KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager)")
    results = []
    with tempfile.TemporaryDirectory() as folder, start_control_plane(Path(folder) / "plane", assets) as plane:
        install_crds(plane)
        async with bench_operator.RealApi(plane) as api:
            await api.create("/api/v1/namespaces", [{"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}}])
            await api.create(f"/apis/lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/mcpserverinterfaces",
                             [bench_operator._real(bench_operator.resource(i)) for i in range(resources)])
            await api.create(f"/api/v1/namespaces/{NAMESPACE}/pods",
                             [bench_operator._real(bench_operator.pod(i, r)) for i in range(resources)
                              for r in range(pods)])
        pids = [process.popen.pid for process in plane._processes[:2]]  # kube-apiserver and etcd

        def api_cpu() -> float:
            return sum(bench_operator.process_cpu(pid) for pid in pids)

        client = KubeClient(kopf.ConnectionInfo(server=plane.server, ca_path=str(plane.ca_file),
                                                certificate_path=str(plane.admin_cert),
                                                private_key_path=str(plane.admin_key)))
        try:
            config = OperatorConfig(namespaces=(NAMESPACE,), status_write_interval=0.0)  # every round flushes
            reconciler = Reconciler(config, client, Metrics(), EventPoster(client))
            await reconciler.resync()
            results.append(await flush("start", reconciler, client, api_cpu))
            for round_ in range(rounds):
                for drifted, name in ((False, "verified"), (True, "drifted")):
                    for i in range(resources):
                        for r in range(pods):
                            pod = reconciler.cache.pod(NAMESPACE, f"server-{i}-{r}")
                            assert pod is not None
                            await reconciler.accept(pod, observation(i, drifted))
                    label = name if rounds == 1 else f"{name} {round_ + 1}"
                    results.append(await flush(label, reconciler, client, api_cpu))
        finally:
            await reconciler.events.drain()
            await client.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resources", type=int, default=1000, help="MCPServerInterfaces, all dirty at each flush")
    parser.add_argument("--pods", type=int, default=2, help="pods per resource")
    parser.add_argument("--rounds", type=int, default=1, help="verified/drifted rounds")
    args = parser.parse_args()
    results = asyncio.run(run(args.resources, args.pods, args.rounds))
    header = ["flush", "dirty", "wall s", "operator CPU ms", "API CPU ms", "requests", "KB sent",
              "per resource: operator CPU ms", "API CPU ms", "requests", "KB sent"]
    rows = []
    for item in results:
        n = max(1, item["dirty"])
        count = sum(item["requests"].values())
        rows.append([item["flush"], str(item["dirty"]), f"{item['wall']:.2f}", f"{item['cpu'] * 1000:.0f}",
                     f"{item['api_cpu'] * 1000:.0f}", str(count), f"{item['sent'] / 1024:.0f}",
                     f"{item['cpu'] * 1000 / n:.2f}", f"{item['api_cpu'] * 1000 / n:.2f}", f"{count / n:.2f}",
                     f"{item['sent'] / 1024 / n:.2f}"])
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    print(f"{args.resources} resources x {args.pods} pods; one flush of every dirty resource (real control plane)")
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    for item in results:
        print(f"{item['flush']}: " + ", ".join(f"{kind} {count}" for kind, count in sorted(item["requests"].items())))


if __name__ == "__main__":
    main()
