"""kopf's work per pod watch event, in process: with kopf's default diff base and with Lockstep's
(``lockstep.operator.watch_only.WatchOnlyDiffBase``, no diff base).

Every pod event the operator watches goes through kopf's ``process_resource_event`` before it reaches
Lockstep's handler; kopf's default builds a diff base of the body (a deep copy), clears it for the
progress storage (a second deep copy) and diffs it against the last one, for on.create/on.update handlers
that Lockstep does not register. This feeds N MODIFIED events of pods shaped like Lockstep's
(bench/floors.py: the injected sidecar, the token volume, a kubelet's status) through
kopf's own processing with the operator's own registry and settings, the handler reaching a reconciler-less
operator (so only kopf's part is counted), and prints CPU and Python calls per event for both storages,
interleaved round by round::

    python bench/pod_events.py --events 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import kopf
from kopf._cogs.structs import ephemera, references
from kopf._core.engines import indexing, posting
from kopf._core.reactor import inventory, processing

from lockstep.operator.app import LockstepOperator
from lockstep.operator.config import OperatorConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from scripts import load_script
from tables import print_table

PODS = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True,
                           verbs=["list", "watch", "patch"])


def pod_events(count: int, pods: int = 100) -> list[dict[str, Any]]:
    """`count` MODIFIED events over `pods` Lockstep-shaped pods, each with a new resourceVersion."""
    floors = load_script("floors")
    bodies = []
    for index in range(pods):
        pod = floors.lockstep_pod(index)
        pod["metadata"].update(namespace="tools", uid=f"uid-{index}", resourceVersion="1")
        pod["status"] = floors.kubelet_status(pod, "2026-11-28T00:00:00Z")
        bodies.append(pod)
    events = []
    for number in range(count):
        body = copy.deepcopy(bodies[number % pods])
        body["metadata"]["resourceVersion"] = str(number + 2)
        events.append({"type": "MODIFIED", "object": body})
    return events


async def process(events: list[dict[str, Any]], settings: kopf.OperatorSettings,
                  registry: kopf.OperatorRegistry, memories: inventory.ResourceMemories) -> None:
    indexers = indexing.OperatorIndexers()
    queue: posting.K8sEventQueue = asyncio.Queue()
    for event in events:
        await processing.process_resource_event(
            lifecycle=kopf.lifecycles.all_at_once, indexers=indexers, registry=registry, settings=settings,
            memories=memories, memobase=ephemera.Memo(), resource=PODS, raw_event=event,  # type: ignore[arg-type]
            event_queue=queue, no_throttling=True)


def measure(storage: str, events: list[dict[str, Any]], *, profile: bool) -> tuple[float, int]:
    """CPU µs per event and Python calls per event (with `profile`) for one storage."""
    operator = LockstepOperator(OperatorConfig())
    settings = operator.settings()
    if storage == "kopf's default":
        settings.persistence.diffbase_storage = kopf.OperatorSettings().persistence.diffbase_storage
    memories = inventory.ResourceMemories()
    work = [copy.deepcopy(event) for event in events]
    profiler = cProfile.Profile() if profile else None
    started = time.process_time()
    if profiler:
        profiler.enable()
    asyncio.run(process(work, settings, operator.registry, memories))
    if profiler:
        profiler.disable()
    cpu = (time.process_time() - started) / len(events) * 1e6
    calls = pstats.Stats(profiler).total_calls if profiler else 0  # type: ignore[attr-defined]
    return cpu, calls // len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    events = pod_events(args.events)
    storages = ("kopf's default", "Lockstep's (no diff base)")
    cpu: dict[str, list[float]] = {name: [] for name in storages}
    for _ in range(args.rounds):  # interleaved, so a noisy moment hits both
        for name in storages:
            cpu[name].append(measure(name, events, profile=False)[0])
    calls = {name: measure(name, events[:200], profile=True)[1] for name in storages}
    base = statistics.median(cpu[storages[0]])
    print(f"{args.events} pod MODIFIED events, {args.rounds} rounds, interleaved; "
          f"a pod's JSON {len(json.dumps(events[0]['object'])) / 1000:.1f} KB")
    print_table(["diff base", "CPU µs per event, median (range)", "ratio", "Python calls per event"],
                [[name, f"{statistics.median(cpu[name]):.0f} ({min(cpu[name]):.0f}-{max(cpu[name]):.0f})",
                  f"{statistics.median(cpu[name]) / base:.2f}", calls[name]] for name in storages])


if __name__ == "__main__":
    main()
